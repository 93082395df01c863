package router.rules;

import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

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
 * <p>The decision's pass decides with one; the state processor runs another over the very rows
 * that pass then reads, in the same order, so both make the same choices.
 */
public final class PassMemory {
  private final Rotation rotation;
  private final Map<String, Set<String>> pending = new HashMap<>();
  private final Set<String> delayed = new HashSet<>();
  /** K2: what each entry ({@code instance\0conversation\0origin\0service}) chose in this pass. */
  private final Map<String, Route.Identity> chosen = new HashMap<>();
  /** K2: what the last message's entry had kept when the message was decided, or null. */
  private Route.Identity before;

  /**
   * A pass that starts from the requests outstanding ({@code pending}, as {@code
   * instance\0scope\0service}) and the {@code rotation} counters (as {@code instance\0key\0next}).
   */
  public PassMemory(String[] pending, String[] rotation) {
    this.rotation = new Rotation(rotation);
    for (String p : pending) {
      int cut = p.indexOf('\u0000');
      this.pending.computeIfAbsent(p.substring(0, cut), k -> new HashSet<>()).add(p.substring(cut + 1));
    }
  }

  /**
   * Decide {@code m} at {@code site}: {@code waits} when its endpoint has messages held (D1), {@code
   * kept} what its conversation kept in earlier batches (K2). Sets {@link #before}; the caller
   * applies F5 ({@link ForwardBuffers}: its budget is the decision pass's alone).
   */
  public Decision decide(Snapshot.Site site, Message m, boolean waits, Route.Identity kept) {
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

  /**
   * K2: what the last message {@link #decide decided} had kept when it was decided (earlier in the
   * pass, or in its row), or null.
   */
  public Route.Identity before() {
    return before;
  }

  /** C5, M3: the rotation counters this pass moved, as {@code instance\0key\0next}. */
  public List<String> advanced() {
    return rotation.advanced();
  }
}
