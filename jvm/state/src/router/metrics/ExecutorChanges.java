package router.metrics;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;

/**
 * The executors a Spark application gained and lost, for the driver to say in a line each.
 *
 * <p>On a cluster an executor goes away with its worker (a machine that dies, a process killed);
 * Spark runs its tasks again elsewhere and logs the loss from several classes, at ERROR and WARN,
 * some with stack traces. The router keeps those classes quiet and reports the change itself from
 * these events: one tab-separated line per change, {@code added<TAB>id<TAB>host<TAB>cores} or
 * {@code removed<TAB>id<TAB>reason}.
 */
public final class ExecutorChanges extends SparkListener {
  private static ExecutorChanges installed;

  private final SparkContext context;
  private final List<String> changes = new ArrayList<>();

  private ExecutorChanges(SparkContext context) {
    this.context = context;
  }

  /** The one listener of {@code context}, added on first use. */
  public static synchronized ExecutorChanges install(SparkContext context) {
    if (installed == null || installed.context != context) {
      installed = new ExecutorChanges(context);
      context.addSparkListener(installed);
    }
    return installed;
  }

  private static String oneLine(String text) {
    return text == null ? "" : text.replace('\t', ' ').replace('\n', ' ').trim();
  }

  @Override
  public synchronized void onExecutorAdded(SparkListenerExecutorAdded event) {
    changes.add(
        "added\t" + event.executorId() + "\t" + oneLine(event.executorInfo().executorHost())
            + "\t" + event.executorInfo().totalCores());
  }

  @Override
  public synchronized void onExecutorRemoved(SparkListenerExecutorRemoved event) {
    changes.add("removed\t" + event.executorId() + "\t" + oneLine(event.reason()));
  }

  /** The changes since the last call, one per line (empty: none); they are forgotten afterwards. */
  public synchronized String take() {
    String text = String.join("\n", changes);
    changes.clear();
    return text;
  }
}
