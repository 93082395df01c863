package router.metrics;

import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLongArray;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;

/**
 * Counts the Spark jobs, stages and tasks each streaming micro-batch runs, and their CPU time.
 *
 * <p>Spark marks every job that a micro-batch starts (its own, and those {@code foreachBatch}
 * starts from the stream's thread, broadcasts included) with the local properties {@code
 * sql.streaming.queryId} and {@code streaming.sql.batchId}; this listener adds them up per (query,
 * batch). Stages are counted when submitted, so a stage whose shuffle output is reused (skipped)
 * does not count.
 */
public final class BatchJobs extends SparkListener {
  private static final String QUERY = "sql.streaming.queryId";
  private static final String BATCH = "streaming.sql.batchId";
  private static BatchJobs installed;

  private final SparkContext context;
  private final ConcurrentHashMap<String, AtomicLongArray> counts = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<Integer, String> stages = new ConcurrentHashMap<>();

  private BatchJobs(SparkContext context) {
    this.context = context;
  }

  /** The one listener of {@code context}, added on first use. */
  public static synchronized BatchJobs install(SparkContext context) {
    if (installed == null || installed.context != context) {
      installed = new BatchJobs(context);
      context.addSparkListener(installed);
    }
    return installed;
  }

  private static String key(Properties properties) {
    if (properties == null) {
      return null;
    }
    String query = properties.getProperty(QUERY);
    String batch = properties.getProperty(BATCH);
    return query == null || batch == null ? null : query + "/" + batch;
  }

  private AtomicLongArray of(String key) {
    return counts.computeIfAbsent(key, k -> new AtomicLongArray(4));
  }

  @Override
  public void onJobStart(SparkListenerJobStart event) {
    String key = key(event.properties());
    if (key != null) {
      of(key).incrementAndGet(0);
    }
  }

  @Override
  public void onStageSubmitted(SparkListenerStageSubmitted event) {
    String key = key(event.properties());
    if (key != null) {
      AtomicLongArray c = of(key);
      c.incrementAndGet(1);
      c.addAndGet(2, event.stageInfo().numTasks());
      stages.put(event.stageInfo().stageId(), key);
    }
  }

  @Override
  public void onTaskEnd(SparkListenerTaskEnd event) {
    String key = stages.get(event.stageId());
    if (key != null && event.taskMetrics() != null) {
      of(key).addAndGet(3, event.taskMetrics().executorCpuTime());
    }
  }

  /**
   * The (jobs, stages, tasks, task CPU nanoseconds) a batch of a query ran, once the events posted
   * so far are delivered; the count is forgotten afterwards.
   */
  public long[] take(String queryId, long batchId) {
    try {
      context.listenerBus().waitUntilEmpty(10_000L);
    } catch (java.util.concurrent.TimeoutException e) {
      // Count what has arrived: the bus is slow, the figure may be a little low.
    }
    String key = queryId + "/" + batchId;
    AtomicLongArray c = counts.remove(key);
    stages.values().removeIf(key::equals);
    return c == null ? new long[4] : new long[] {c.get(0), c.get(1), c.get(2), c.get(3)};
  }
}
