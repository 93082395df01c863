package router.rules;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.types.StructType;

/**
 * What a pass over a partition's rows carries from one message to the next, with the batch
 * semantics of {@code streaming.rules.batch}:
 *
 * <ul>
 *   <li>D1, B7: the conversation endpoints delayed earlier in the pass (a later message of one is
 *       delayed behind it);
 *   <li>B4: per instance, the MissingRoute requests outstanding or asked earlier in the pass;
 *   <li>K2: what each conversation's entry chose earlier in the pass;
 *   <li>C5, M3: the rotation of equal options ({@link Rotation}).
 * </ul>
 *
 * <p>{@link Decide}'s pass decides with one. The state processor ({@code router.state.RouterState})
 * runs another over the very rows that pass then reads, in the same order, when the batch is not
 * decided in one pass ({@link Snapshot#inOnePass}): the rows leave the processor straight into the
 * decision, in the same task, so both passes see the same messages with the same memory and make
 * the same choices. That lets the processor keep a conversation's new choice (K2) in its state at
 * once ({@link #choose}), instead of reading it back from the choices topic a batch later.
 */
public final class PassState {
  final Snapshot snapshot;
  final Rotation rotation;
  private final Map<String, Set<String>> pending = new HashMap<>();
  private final Set<String> delayed = new HashSet<>();
  /** K2: what each entry ({@code instance\0conversation\0origin\0service}) chose in this pass. */
  private final Map<String, Route.Identity> chosen = new HashMap<>();
  /** K2: what the last message's entry had kept when the message was decided (earlier in the pass, or in its row), or null. */
  Route.Identity before;

  PassState(Snapshot snapshot, DecisionInputs inputs) {
    this.snapshot = snapshot;
    this.rotation = new Rotation(inputs.rotation());
    for (String p : inputs.pending()) {
      int cut = p.indexOf('\u0000');
      pending.computeIfAbsent(p.substring(0, cut), k -> new HashSet<>()).add(p.substring(cut + 1));
    }
  }

  /**
   * The pass the state processor runs over its rows, or null when it cannot learn the batch's
   * choices from them: no snapshot was set yet, or the batch is decided in one pass (B4's first
   * asker and the rotation of C5 and M3 then follow the whole batch's order, not the processor's).
   */
  public static PassState forProcessor(DecisionInputs inputs) {
    Snapshot snapshot = inputs == null ? null : inputs.snapshotOrNull();
    return snapshot == null || snapshot.inOnePass() ? null : new PassState(snapshot, inputs);
  }

  /**
   * Decide {@code m} at {@code site}: {@code waits} when its endpoint has messages held (D1), {@code
   * kept} what its conversation kept in earlier batches (K2). Sets {@link #before}; the caller
   * applies F5 (its budget is the decision pass's alone).
   */
  Decision decide(Snapshot.Site site, Message m, boolean waits, Route.Identity kept) {
    String instance = site.key;
    String endpoint = instance + "\u0000" + m.conversationId + (m.fromTarget ? "\u0000t" : "\u0000i");
    Set<String> asked = pending.computeIfAbsent(instance, k -> new HashSet<>());
    String entry = null;
    before = null;
    Decision d;
    if (!m.isRemote() && (waits || delayed.contains(endpoint))) {
      d = Engine.delayedBehind(m);
    } else {
      if (m.remembersChoice()) {
        entry = instance + "\u0000" + m.conversationId + "\u0000" + m.origin + "\u0000" + m.service;
        before = chosen.get(entry);
        if (before == null) {
          before = kept;
        }
      }
      d = Engine.decide(m, site, asked, before, rotation);
    }
    if (d.requests != null && d.scope != null) {
      asked.add(d.scope + "\u0000" + d.requests);
    }
    if (Decision.DELAYED.equals(d.outcome)) {
      delayed.add(endpoint);
    }
    if (d.remembered != null) {
      chosen.put(entry, d.remembered);
    }
    return d;
  }

  /** Where the columns the rules read are in a message as the state processor leaves it. */
  public static final class Leaving extends MessageFields {
    private static final long serialVersionUID = 1L;

    private Leaving(StructType s) {
      super(s);
    }

    /**
     * The columns of {@code schema}, or null when it lacks one (the processor then decides
     * nothing). Its messages carry their lifetime as they came ({@code expires_ms}, {@code ttl_ms}).
     */
    public static Leaving of(StructType schema) {
      try {
        Leaving f = new Leaving(schema);
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
  public String[] choose(Leaving f, Object[] v, long nowMs, boolean waits, String[] kept) {
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
            MessageFields.remainingS((Number) v[f.expiresMs], (Number) v[f.ttlMs], nowMs),
            ((Number) v[f.size]).longValue());
    Route.Identity was = kept == null ? null : Route.Identity.kept(kept[0], kept[1], kept[2]);
    Decision d = decide(site, m, waits, was);
    if (d.remembered == null || d.remembered.equals(before)) {
      return null;
    }
    return new String[] {d.remembered.brokerInstance, d.remembered.service, d.remembered.address};
  }
}
