package router.plan;

import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.util.CaseInsensitiveMap;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.kafka010.KafkaSourceProvider$;
import org.apache.spark.sql.kafka010.KafkaWriter;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Writes a micro-batch's records with the Spark Kafka connector's writer, and returns the batch's
 * observed metrics from the very run that wrote them.
 *
 * <p>{@code df.write.format("kafka").save()} runs the records in a query execution of its own,
 * out of the caller's reach, so metrics observed on the way ({@code Dataset.observe}) are not
 * delivered to an {@code Observation}. This runs the connector's {@code KafkaWriter} on the
 * records' own query execution (the producer settings made from the same {@code kafka.*} options
 * the source and sink take) and reads {@code observedMetrics} from it afterwards.
 */
public final class KafkaWrite {
  private KafkaWrite() {}

  /**
   * Write {@code records} (key, value, topic, headers) to Kafka with {@code options} (the Spark
   * Kafka sink's: {@code kafka.bootstrap.servers}, other {@code kafka.*}); return the metrics
   * observed under {@code observed}, or null when the plan observed none by that name.
   */
  public static Row write(Dataset<Row> records, Map<String, String> options, String observed) {
    QueryExecution execution = records.queryExecution();
    run(execution, options);
    Option<Row> metrics = execution.observedMetrics().get(observed);
    return metrics.isDefined() ? metrics.get() : null;
  }

  /** Run {@code execution}'s records (key, value, topic, headers) into Kafka with {@code options}. */
  static void run(QueryExecution execution, Map<String, String> options) {
    scala.collection.immutable.Map<String, String> given =
        scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(options));
    CaseInsensitiveMap<String> parameters = new CaseInsensitiveMap<>(given);
    Map<String, Object> producer = KafkaSourceProvider$.MODULE$.kafkaParamsForProducer(parameters);
    KafkaWriter.write(execution, producer, Option.empty());
  }
}
