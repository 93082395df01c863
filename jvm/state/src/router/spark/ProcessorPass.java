package router.spark;

import org.apache.spark.sql.types.StructType;
import router.rules.Message;
import router.rules.PassMemory;
import router.rules.Route;
import router.rules.Snapshot;

/**
 * The decision's pass as the state processor ({@link ConversationState}) runs it over the
 * messages leaving it, when the batch is not decided in one pass ({@link Snapshot#inOnePass}): the
 * rows leave the processor straight into the decision, in the same task and the same order, so
 * both passes see the same messages with the same memory ({@link PassMemory}) and make the same
 * choices. That lets the processor keep a conversation's new choice (K2) in its state at once
 * ({@link #choose}), instead of reading it back from the choices topic a batch later.
 */
public final class ProcessorPass {
  private final Snapshot snapshot;
  private final PassMemory memory;

  private ProcessorPass(Snapshot snapshot, DecisionInputs inputs) {
    this.snapshot = snapshot;
    this.memory = new PassMemory(inputs.pending(), inputs.rotation());
  }

  /**
   * The pass the state processor runs over its rows, or null when it cannot learn the batch's
   * choices from them: no snapshot was set yet, or the batch is decided in one pass (B4's first
   * asker and the rotation of C5 and M3 then follow the whole batch's order, not the processor's).
   */
  public static ProcessorPass forProcessor(DecisionInputs inputs) {
    Snapshot snapshot = inputs == null ? null : inputs.snapshotOrNull();
    return snapshot == null || snapshot.inOnePass() ? null : new ProcessorPass(snapshot, inputs);
  }

  /** Where the columns the rules read are in a message as the state processor leaves it. */
  public static final class LeavingColumns extends MessageColumns {
    private static final long serialVersionUID = 1L;

    private LeavingColumns(StructType s) {
      super(s);
    }

    /**
     * The columns of {@code schema}, or null when it lacks one (the processor then decides
     * nothing). Its messages carry their lifetime as they came ({@code expires_ms}, {@code ttl_ms}).
     */
    public static LeavingColumns of(StructType schema) {
      try {
        LeavingColumns f = new LeavingColumns(schema);
        return f.expiresMs >= 0 ? f : null;
      } catch (IllegalArgumentException missing) {
        return null;
      }
    }
  }

  /**
   * K2 in the state processor: decide one message as it leaves the processor ({@code v}, its values
   * at {@code f}'s columns) at the batch's time {@code nowMs}; {@code waits} when its endpoint has
   * messages held (D1), {@code kept} what its entry kept in earlier batches. Returns the identity
   * (broker instance or "", service or "", address) its decision keeps anew, where the decision's
   * pass would give it a {@code k_change}; else null. A message that did not decode, or of an
   * instance the snapshot does not hold, is not decided.
   */
  public String[] choose(LeavingColumns f, Object[] v, long nowMs, boolean waits, String[] kept) {
    if (f.error >= 0 && v[f.error] != null) {
      return null;
    }
    Snapshot.Site site = snapshot.site((String) v[f.instance]);
    if (site == null) {
      return null;
    }
    Message m =
        new Message(
            (String) v[f.conversation],
            (String) v[f.service],
            (String) v[f.origin],
            (String) v[f.broker],
            Boolean.TRUE.equals(v[f.fromTarget]),
            ((Number) v[f.hops]).intValue(),
            Message.remainingS((Number) v[f.expiresMs], (Number) v[f.ttlMs], nowMs),
            ((Number) v[f.size]).longValue());
    Route.Identity was = kept == null ? null : Route.Identity.kept(kept[0], kept[1], kept[2]);
    Route.Identity keeps = memory.decide(site, m, waits, was).remembered();
    if (keeps == null || keeps.equals(memory.before())) {
      return null;
    }
    return new String[] {keeps.brokerInstance, keeps.service, keeps.address};
  }
}
