package router.plan;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.CollectMetricsExec;
import org.apache.spark.sql.execution.CollectMetricsExec$;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeLike;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.StructType;

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
 * taken for the next batch's. {@link #reusable} says whether the built query is such.
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

  /** The table to build the query over: each run reads the micro-batch given to it. */
  public Dataset<Row> input() {
    return frame;
  }

  /** Keep {@code records}, a query over {@link #input}; plan it now; return {@link #reusable}. */
  public boolean keep(Dataset<Row> records) {
    QueryExecution built = records.queryExecution();
    SparkPlan plan = built.executedPlan();
    List<CollectMetricsExec> found = new ArrayList<>();
    plan.foreach(
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
    return reusable();
  }

  /** Whether the kept query may run again: it has no shuffle of its own. */
  public boolean reusable() {
    return execution != null && !shuffles(execution);
  }

  /** Whether {@code query}'s plan shuffles (a query put under the kept one by an RDD is not seen in its plan). */
  public static boolean shuffles(Dataset<Row> query) {
    return shuffles(query.queryExecution());
  }

  private static boolean shuffles(QueryExecution query) {
    boolean[] shuffles = {false};
    query
        .executedPlan()
        .foreach(
            new scala.runtime.AbstractFunction1<SparkPlan, scala.runtime.BoxedUnit>() {
              @Override
              public scala.runtime.BoxedUnit apply(SparkPlan node) {
                if (node instanceof ShuffleExchangeLike) {
                  shuffles[0] = true;
                }
                return scala.runtime.BoxedUnit.UNIT;
              }
            });
    return shuffles[0];
  }

  /**
   * Run the kept query over {@code batch} and write its records to Kafka ({@link KafkaWrite});
   * return the metrics observed under {@code observed} in this run, or null when none.
   */
  public Row write(Dataset<Row> batch, Map<String, String> options, String observed) {
    if (execution == null) {
      throw new IllegalStateException("a prepared query was run before one was kept");
    }
    org.apache.spark.rdd.RDD<InternalRow> rows = batch.queryExecution().toRdd();
    input.take(rows);
    for (CollectMetricsExec observer : observers) {
      observer.resetMetrics();
    }
    KafkaWrite.run(execution, options);
    scala.Option<Row> metrics = CollectMetricsExec$.MODULE$.collect(execution.executedPlan()).get(observed);
    return metrics.isDefined() ? metrics.get() : null;
  }
}
