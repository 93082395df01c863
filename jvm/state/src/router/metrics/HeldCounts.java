package router.metrics;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.util.AccumulatorV2;

/**
 * How the delayed messages the state processor holds (D1, D2) changed in a micro-batch, by instance:
 * messages held, conversation endpoints holding any, and the messages held by the second they were
 * delayed in. The processor adds each key's change when its memory changes; the driver takes the
 * batch's sum after the batch ({@link #take}) and adds it to the figures it keeps, so that it knows
 * what the state holds without reading the state store (which it reads once, when it starts).
 *
 * <p>A change is a map of signed counts: {@code instance NUL "m"} (messages), {@code instance NUL
 * "c"} (conversation endpoints), {@code instance NUL "s" NUL second} (messages delayed in that
 * second, epoch seconds). Counts that sum to zero are dropped.
 */
public final class HeldCounts extends AccumulatorV2<HeldCounts.Change, Map<String, Long>> {
  private static final long serialVersionUID = 1L;
  private static final char SEP = '\u0000';

  private HashMap<String, Long> counts = new HashMap<>();

  /** One key's change: the delayed times of its held messages before and after the step. */
  public static final class Change {
    final String instance;
    final long[] before;
    final long[] after;

    public Change(String instance, long[] before, long[] after) {
      this.instance = instance;
      this.before = before;
      this.after = after;
    }
  }

  /** A new accumulator, registered with {@code context}: what the driver hands the processor. */
  public static HeldCounts register(SparkContext context) {
    HeldCounts counts = new HeldCounts();
    context.register(counts, "router held messages");
    return counts;
  }

  /** The instance of a state key ({@code instance NUL conversation NUL side}). */
  public static String instanceOf(String key) {
    int end = key.indexOf(SEP);
    return end < 0 ? key : key.substring(0, end);
  }

  @Override
  public boolean isZero() {
    return counts.isEmpty();
  }

  @Override
  public HeldCounts copy() {
    HeldCounts out = new HeldCounts();
    out.counts = new HashMap<>(counts);
    return out;
  }

  @Override
  public void reset() {
    counts = new HashMap<>();
  }

  @Override
  public void add(Change change) {
    if (change.before.length == change.after.length && change.before.length == 0) {
      return;
    }
    String i = change.instance + SEP;
    bump(i + "m", change.after.length - change.before.length);
    bump(i + "c", (change.after.length > 0 ? 1 : 0) - (change.before.length > 0 ? 1 : 0));
    for (long at : change.before) {
      bump(i + "s" + SEP + Math.floorDiv(at, 1000L), -1);
    }
    for (long at : change.after) {
      bump(i + "s" + SEP + Math.floorDiv(at, 1000L), 1);
    }
  }

  private void bump(String key, long by) {
    if (by != 0) {
      counts.merge(key, by, (a, b) -> a + b == 0 ? null : a + b);
    }
  }

  @Override
  public synchronized void merge(AccumulatorV2<Change, Map<String, Long>> other) {
    for (Map.Entry<String, Long> e : other.value().entrySet()) {
      bump(e.getKey(), e.getValue());
    }
  }

  @Override
  public Map<String, Long> value() {
    return counts;
  }

  /**
   * The changes summed since the last take, one {@code key NUL count} line each, and the sum
   * cleared (on the driver, between micro-batches). One string: the driver reads it in one call
   * through py4j, where a list costs a call per element.
   */
  public synchronized String take() {
    StringBuilder out = new StringBuilder();
    for (Map.Entry<String, Long> e : counts.entrySet()) {
      out.append(e.getKey()).append(SEP).append(e.getValue()).append('\n');
    }
    counts = new HashMap<>();
    return out.toString();
  }
}
