package router.rules;

import java.util.HashMap;
import java.util.Map;

/**
 * F5: the bytes a pass has forwarded, by instance. What a batch forwards is in flight together
 * until its write is done; the partitions of a batch are written side by side, so each of its
 * {@code passes} has an equal share of an instance's MESSAGE_FORWARD_SIZE (the whole of it in one).
 */
public final class ForwardBuffers {
  private final Map<String, Long> inFlight = new HashMap<>();
  private final int passes;

  /** The buffers of one of a batch's {@code passes} (at least one). */
  public ForwardBuffers(int passes) {
    this.passes = Math.max(1, passes);
  }

  /**
   * F5, {@code discarded_for_buffer}: {@code d}, the decision of {@code m} at {@code site}, when it
   * forwards, takes its bytes from the pass's share, or is discarded ({@code forward_buffer_full})
   * when they would not fit.
   */
  public void take(Snapshot.Site site, Message m, Decision d) {
    if (!Decision.FORWARD.equals(d.outcome)) {
      return;
    }
    long before = inFlight.getOrDefault(site.key, 0L);
    if (before + m.sizeBytes > site.forwardBytes / passes) {
      Engine.discardForBuffer(d);
    } else {
      inFlight.put(site.key, before + m.sizeBytes);
    }
  }
}
