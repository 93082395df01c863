# The router job for docker-compose.yml: the `streaming` package with pyspark and the Kafka connector
# jars, on the same Spark image as the master and worker, so that the driver (here) and the executors
# run the same Java 17 and the same Python.
FROM apache/spark:4.1.1-scala2.13-java17-python3-ubuntu AS spark

# The router's state processor (jvm/state), compiled against the image's own Spark jars.
FROM eclipse-temurin:17-jdk AS state
COPY --from=spark /opt/spark/jars /spark-jars
COPY jvm/state/src /src
RUN mkdir /classes \
    && javac -nowarn --release 17 -d /classes -cp '/spark-jars/*' $(find /src -name '*.java') \
    && jar --create --file /router-state.jar -C /classes .

FROM spark

USER root
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends maven; \
    rm -rf /var/lib/apt/lists/*

WORKDIR /app
# The jars land where streaming/jars.py looks: <project root>/.cache/jars/{spark,router}.
ENV ROUTER_CACHE_DIR=/app/.cache \
    PYTHONUNBUFFERED=1
COPY jvm/ jvm/
RUN mvn -q -B -f jvm/spark/pom.xml dependency:copy-dependencies -Djars.dir=/app/.cache/jars/spark \
    && rm -rf /root/.m2

COPY --from=state /router-state.jar /app/.cache/jars/router/router-state.jar
COPY pyproject.toml README.md ./
COPY streaming/ streaming/
COPY schemas/ schemas/
COPY routes/ routes/
RUN python3 -m pip install --no-cache-dir -e . \
    && mkdir -p /app/.state /app/config \
    && chown -R spark:spark /app

USER spark
# The image's entrypoint passes any other command through: docker-compose.yml runs `router run ...`
# with ./config mounted on /app/config.
CMD ["router", "--help"]
