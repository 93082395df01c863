package router.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.util.CollectionAccumulator;
import router.rules.Snapshot;

/**
 * What a kept batch plan decides with: the route snapshot (broadcast), the MissingRoute requests
 * outstanding (B4, as {@code instance\0scope\0service}) and the rotation counters of C5 and M3 (as
 * {@code instance\0key\0next}, see {@code router.rules.Rotation}), set by the driver before each micro-batch.
 *
 * <p>The decision's pass holds this object, and Spark serializes a job's RDDs, this included, when
 * it submits the job: each batch's tasks get what was set before it ran. So a route change or a
 * new request reaches the next batch without planning its query again. The counters a pass
 * advanced come back through an accumulator ({@link #advanced}); a batch whose snapshot has sets of
 * equal options is decided in one pass, so they are the batch's.
 */
public final class DecisionInputs implements Serializable {
  private static final long serialVersionUID = 1L;
  private Broadcast<Snapshot> snapshot;
  private String[] pending = new String[0];
  private String[] rotation = new String[0];
  private final CollectionAccumulator<String> advanced;

  DecisionInputs(SparkContext context) {
    this.advanced = context.collectionAccumulator("router rotation");
  }

  /** Decide the next batches with {@code snapshot}, {@code pending} and the {@code rotation} counters. */
  public synchronized void set(Broadcast<Snapshot> snapshot, List<String> pending, List<String> rotation) {
    this.snapshot = snapshot;
    this.pending = pending.toArray(new String[0]);
    this.rotation = rotation.toArray(new String[0]);
    advanced.reset();
  }

  /** The counters the passes since the last {@link #set} advanced, as {@code instance\0key\0next}. */
  public synchronized List<String> advanced() {
    return new ArrayList<>(advanced.value());
  }

  synchronized Snapshot snapshot() {
    Snapshot set = snapshotOrNull();
    if (set == null) {
      throw new IllegalStateException("a batch was decided before a route snapshot was set");
    }
    return set;
  }

  /** The snapshot set, or null before the first {@link #set}. */
  synchronized Snapshot snapshotOrNull() {
    return snapshot == null ? null : snapshot.value();
  }

  synchronized String[] pending() {
    return pending;
  }

  synchronized String[] rotation() {
    return rotation;
  }

  /** Where a pass hands back the counters it advanced (in the task that ran it). */
  void report(List<String> counters) {
    for (String c : counters) {
      advanced.add(c);
    }
  }
}
