package router.rules;

import java.io.Serializable;
import java.util.List;

import org.apache.spark.broadcast.Broadcast;

/**
 * What a kept batch plan decides with: the route snapshot (broadcast) and the MissingRoute
 * requests outstanding (B4, as {@code instance\0scope\0service}), set by the driver before each
 * micro-batch.
 *
 * <p>The decision's pass holds this object, and Spark serializes a job's RDDs, this included, when
 * it submits the job: each batch's tasks get what was set before it ran. So a route change or a
 * new request reaches the next batch without planning its query again.
 */
public final class DecisionInputs implements Serializable {
  private static final long serialVersionUID = 1L;
  private Broadcast<Snapshot> snapshot;
  private String[] pending = new String[0];

  /** Decide the next batches with {@code snapshot} and {@code pending}. */
  public synchronized void set(Broadcast<Snapshot> snapshot, List<String> pending) {
    this.snapshot = snapshot;
    this.pending = pending.toArray(new String[0]);
  }

  synchronized Snapshot snapshot() {
    if (snapshot == null) {
      throw new IllegalStateException("a batch was decided before a route snapshot was set");
    }
    return snapshot.value();
  }

  synchronized String[] pending() {
    return pending;
  }
}
