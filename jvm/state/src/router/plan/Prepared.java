package router.plan;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.Dependency;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.CollectMetricsExec;
import org.apache.spark.sql.execution.CollectMetricsExec$;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag$;

/**
 * A batch query planned once and run over each micro-batch, with no planning per batch.
 *
 * <p>Spark analyzes, optimizes, plans and generates code for a query every time it runs one:
 * for the router's decision, a wide query, that is most of a small micro-batch's time. A
 * prepared query is built once (per route snapshot) over {@link #input}, a table that reads
 * whichever micro-batch it was last given; {@link #write} gives it the batch's rows (the RDD
 * Spark already planned for the streaming query) and runs the kept query again: the same
 * physical plan, the same generated code, the snapshot tables broadcast once.
 *
 * <p>Only a query without a shuffle of its own can be kept: a shuffle's map outputs would be
 * taken for the next batch's ({@link #keep} refuses such a query).
 */
public final class Prepared {
  private final BatchInput input;
  private final Dataset<Row> frame;
  private QueryExecution execution;
  private List<CollectMetricsExec> observers = List.of();

  /** A prepared query's input, for micro-batches of {@code like}'s schema and partitions. */
  public Prepared(Dataset<Row> like) {
    SparkSession session = (SparkSession) like.sparkSession();
    int partitions = like.queryExecution().toRdd().getNumPartitions();
    this.input = new BatchInput(session.sparkContext(), partitions);
    this.frame = session.internalCreateDataFrame(input, like.schema(), false);
  }

  /**
   * A batch of no rows in {@code partitions} partitions, of exactly {@code schema}: what a query
   * over micro-batches of that schema can be planned and run over before the first one arrives.
   */
  public static Dataset<Row> emptyBatch(SparkSession session, StructType schema, int partitions) {
    RDD<InternalRow> rows =
        session
            .sparkContext()
            .parallelize(
                CollectionConverters.asScala(List.<InternalRow>of()).toSeq(),
                partitions,
                ClassTag$.MODULE$.apply(InternalRow.class));
    return session.internalCreateDataFrame(rows, schema, false);
  }

  /** The table to build the query over: each run reads the micro-batch given to it. */
  public Dataset<Row> input() {
    return frame;
  }

  /**
   * Keep {@code records}, a query over {@link #input}, planned now; return whether it was kept.
   *
   * <p>It is not kept when a shuffle runs between {@link #input} and its output: that shuffle's map
   * outputs would be read again, for the next batch, as if they were new. The RDDs are searched,
   * not the plan, so a step put under the query as an RDD (the decision pass) is seen too.
   */
  public boolean keep(Dataset<Row> records) {
    QueryExecution built = records.queryExecution();
    if (shuffles(built.toRdd())) {
      return false;
    }
    List<CollectMetricsExec> found = new ArrayList<>();
    built
        .executedPlan()
        .foreach(
            new scala.runtime.AbstractFunction1<SparkPlan, scala.runtime.BoxedUnit>() {
              @Override
              public scala.runtime.BoxedUnit apply(SparkPlan node) {
                if (node instanceof CollectMetricsExec) {
                  found.add((CollectMetricsExec) node);
                }
                return scala.runtime.BoxedUnit.UNIT;
              }
            });
    this.execution = built;
    this.observers = List.copyOf(found);
    return true;
  }

  /** Whether a shuffle dependency lies on the way from {@code rdd} down to {@link #input}. */
  private boolean shuffles(RDD<?> rdd) {
    Deque<RDD<?>> toVisit = new ArrayDeque<>(List.of(rdd));
    Set<Integer> seen = new HashSet<>();
    while (!toVisit.isEmpty()) {
      RDD<?> next = toVisit.pop();
      if (next == input || !seen.add(next.id())) {
        continue;
      }
      for (Dependency<?> dependency : CollectionConverters.asJava(next.dependencies())) {
        if (dependency instanceof ShuffleDependency) {
          return true;
        }
        toVisit.push(dependency.rdd());
      }
    }
    return false;
  }

  /**
   * Run the kept query over {@code batch} and write its records to Kafka ({@link KafkaWrite});
   * return the metrics observed under {@code observed} in this run, or null when none.
   */
  public Row write(Dataset<Row> batch, Map<String, String> options, String observed) {
    if (execution == null) {
      throw new IllegalStateException("a prepared query was run before one was kept");
    }
    input.take(batch.queryExecution().toRdd());
    for (CollectMetricsExec observer : observers) {
      observer.resetMetrics();
    }
    KafkaWrite.run(execution, options);
    scala.Option<Row> metrics = CollectMetricsExec$.MODULE$.collect(execution.executedPlan()).get(observed);
    return metrics.isDefined() ? metrics.get() : null;
  }
}
