package router.state;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * What the router remembers of one conversation between micro-batches: kept choices (K2) and held
 * delayed messages (D1, D2).
 *
 * <p>This is the Java rendering of {@code streaming.rules.memory.Conversation} (the one
 * description of these rules), method for method, with no Spark in it: {@code
 * router.spark.ConversationState} keeps one per conversation in Spark's state store, and the tests
 * replay generated event sequences through both and compare ({@link #replayJson}). Times are
 * milliseconds since the epoch.
 *
 * @param <M> a message, as the caller carries it (a Spark row in the job)
 */
public final class ConversationMemory<M> {

  /** K2: the C0 identity (broker instance or "", service or "", address) chosen, and when. */
  public static final class Kept {
    public final String[] identity;
    public final long chosenAt;

    public Kept(String[] identity, long chosenAt) {
      this.identity = identity;
      this.chosenAt = chosenAt;
    }
  }

  /** D1: a delayed message held for its conversation. */
  public static final class Held<M> {
    public final M message;
    /** D1: a message is held once; copies of it share this id. */
    public final String messageId;
    public final long order;
    public final long delayedAt;
    public final String entry;
    /** K2: the identity its entry kept when it was delayed; it is decided with it when released. */
    public final String[] kept;

    public Held(M message, String messageId, long order, long delayedAt, String entry, String[] kept) {
      this.message = message;
      this.messageId = messageId;
      this.order = order;
      this.delayedAt = delayedAt;
      this.entry = entry;
      this.kept = kept;
    }
  }

  /** A new message of a step, with its order and entry (origin database, target service). */
  public static final class Arrival<M> {
    public final M message;
    public final long order;
    public final String entry;

    public Arrival(M message, long order, String entry) {
      this.message = message;
      this.order = order;
      this.entry = entry;
    }
  }

  /** What the memory tells a new message. */
  public static final class Given<M> {
    public final M message;
    public final String[] kept;
    public final boolean waiting;
    public final boolean firstOfEntry;

    Given(M message, String[] kept, boolean waiting, boolean firstOfEntry) {
      this.message = message;
      this.kept = kept;
      this.waiting = waiting;
      this.firstOfEntry = firstOfEntry;
    }
  }

  /** What left one step: the held messages that fell due, then the new ones; and the next time. */
  public static final class Step<M> {
    public final List<Given<M>> released;
    public final List<Given<M>> given;
    /** When to look again though nothing arrives, or {@code Long.MAX_VALUE}. */
    public final long nextAt;

    Step(List<Given<M>> released, List<Given<M>> given, long nextAt) {
      this.released = released;
      this.given = given;
      this.nextAt = nextAt;
    }
  }

  private final Map<String, Kept> kept = new LinkedHashMap<>();
  /** D1: the held messages by message id (a message is held once); put in order when read. */
  private final Map<String, Held<M>> held = new java.util.HashMap<>();
  /** Something was remembered, held, forgotten or released since {@link #settle}. */
  private boolean changed;

  private List<Held<M>> inOrder() {
    List<Held<M>> out = new ArrayList<>(held.values());
    out.sort(Comparator.comparingLong(h -> h.order));
    return out;
  }

  /** The kept choices, by entry key. */
  public Map<String, Kept> kept() {
    return Collections.unmodifiableMap(kept);
  }

  /** The held messages, in order. */
  public List<Held<M>> held() {
    return Collections.unmodifiableList(inOrder());
  }

  /**
   * Whether the memory changed since it was made or last {@link #settle settled}: when it did not,
   * the state that holds it need not be written again.
   */
  public boolean changed() {
    return changed;
  }

  /** The memory as it is now is the one kept: {@link #changed} is false until it next changes. */
  public void settle() {
    changed = false;
  }

  /** Nothing is remembered: the conversation's state can be removed. */
  public boolean isEmpty() {
    return kept.isEmpty() && held.isEmpty();
  }

  /** The key of an entry: origin database and target service, joined by NUL. */
  public static String entry(String origin, String service) {
    return (origin == null ? "" : origin) + '\u0000' + (service == null ? "" : service);
  }

  /** A choice record read back: entry, identity, when it was made, and the order it was recorded in. */
  public static final class Choice {
    public final String entry;
    public final String[] identity;
    public final long at;
    public final long order;

    public Choice(String entry, String[] identity, long at, long order) {
      this.entry = entry;
      this.identity = identity;
      this.at = at;
      this.order = order;
    }
  }

  /**
   * K2: a decision chose {@code identity} for {@code entry} at {@code at}; an older record read
   * late changes nothing, and of two made at the same instant the one remembered last counts.
   */
  public void remember(String entry, String[] identity, long at) {
    Kept before = kept.get(entry);
    if (before != null && (before.chosenAt > at || before.chosenAt == at && Arrays.equals(before.identity, identity))) {
      return;
    }
    kept.put(entry, new Kept(identity, at));
    changed = true;
  }

  /** K2: remember a step's choice records by time, then by the order they were recorded in. */
  public void rememberAll(List<Choice> choices) {
    List<Choice> ordered = new ArrayList<>(choices);
    ordered.sort(Comparator.<Choice>comparingLong(c -> c.at).thenComparingLong(c -> c.order));
    for (Choice c : ordered) {
      remember(c.entry, c.identity, c.at);
    }
  }

  /**
   * D1: a message of {@code entry} was delayed at {@code at}; it is held with the others, by order.
   * A message is held once: of two copies with one {@code messageId} (a delayed record written
   * twice when a batch was run again after a crash), the one with the lower order stays.
   */
  public void hold(M message, String messageId, long order, long at, String entry, String[] keptIdentity) {
    Held<M> copy = held.get(messageId);
    if (copy == null || copy.order > order) {
      held.put(messageId, new Held<>(message, messageId, order, at, entry, keptIdentity));
      changed = true;
    }
  }

  /** D2: when the held messages leave, or {@code Long.MAX_VALUE} when none is held. */
  public long dueAt(long retry) {
    long first = Long.MAX_VALUE;
    for (Held<M> h : held.values()) {
      first = Math.min(first, h.delayedAt);
    }
    return first == Long.MAX_VALUE ? Long.MAX_VALUE : first + retry;
  }

  /** K2: a choice is remembered {@code keep} after it was made, then forgotten. */
  public void forgetExpired(long now, long keep) {
    for (Iterator<Kept> it = kept.values().iterator(); it.hasNext(); ) {
      if (it.next().chosenAt + keep <= now) {
        it.remove();
        changed = true;
      }
    }
  }

  /** D2: when the conversation is due, every held message leaves, in order. */
  public List<Held<M>> releaseDue(long now, long retry) {
    long due = dueAt(retry);
    if (due == Long.MAX_VALUE || due > now) {
      return Collections.emptyList();
    }
    List<Held<M>> out = inOrder();
    held.clear();
    changed = true;
    return out;
  }

  /** The earliest instant something is forgotten or falls due, or {@code Long.MAX_VALUE}. */
  public long nextAt(long keep, long retry) {
    long next = dueAt(retry);
    for (Kept k : kept.values()) {
      next = Math.min(next, k.chosenAt + keep);
    }
    return next;
  }

  /**
   * After the step's choices were remembered and its delayed messages held: forget expired
   * choices, release the held messages if due, then give each new message, by order, its entry's
   * kept choice and whether messages are still held.
   */
  public Step<M> step(long now, long keep, long retry, List<Arrival<M>> arrivals) {
    forgetExpired(now, keep);
    Set<String> seen = new HashSet<>();
    List<Given<M>> released = new ArrayList<>();
    for (Held<M> h : releaseDue(now, retry)) {
      released.add(new Given<>(h.message, h.kept, false, seen.add(h.entry)));
    }
    List<Arrival<M>> ordered = new ArrayList<>(arrivals);
    ordered.sort(Comparator.comparingLong(a -> a.order));
    List<Given<M>> given = new ArrayList<>(ordered.size());
    for (Arrival<M> a : ordered) {
      Kept k = kept.get(a.entry);
      given.add(new Given<>(a.message, k == null ? null : k.identity, !held.isEmpty(), seen.add(a.entry)));
    }
    return new Step<>(released, given, nextAt(keep, retry));
  }

  /**
   * Replays a sequence of steps given as JSON and returns what each step gave, as JSON: the test
   * hook that holds this class to the Python description.
   *
   * <p>Input: {@code {"keep": ms, "retry": ms, "steps": [{"now": ms, "choices": [[origin,
   * service, [bid, service, address], at, order], ...], "delayed": [[id, order, at, origin, service,
   * identity-or-null], ...], "messages": [[id, order, origin, service], ...]}, ...]}}. Output: per
   * step {@code {"released": [given...], "given": [given...], "next": ms-or-null, "kept": {entry:
   * [identity, at]}, "held": [id, ...]}}, a given being {@code [id, identity-or-null, waiting,
   * first]}.
   */
  public static String replayJson(String json) throws java.io.IOException {
    com.fasterxml.jackson.databind.ObjectMapper mapper = new com.fasterxml.jackson.databind.ObjectMapper();
    com.fasterxml.jackson.databind.JsonNode root = mapper.readTree(json);
    long keep = root.get("keep").asLong();
    long retry = root.get("retry").asLong();
    ConversationMemory<String> memory = new ConversationMemory<>();
    com.fasterxml.jackson.databind.node.ArrayNode out = mapper.createArrayNode();
    for (com.fasterxml.jackson.databind.JsonNode step : root.get("steps")) {
      List<Choice> choices = new ArrayList<>();
      for (com.fasterxml.jackson.databind.JsonNode c : step.get("choices")) {
        choices.add(
            new Choice(
                entry(c.get(0).asText(), c.get(1).asText()), strings(c.get(2)), c.get(3).asLong(), c.get(4).asLong()));
      }
      memory.rememberAll(choices);
      for (com.fasterxml.jackson.databind.JsonNode d : step.get("delayed")) {
        memory.hold(
            d.get(0).asText(),
            d.get(0).asText(),
            d.get(1).asLong(),
            d.get(2).asLong(),
            entry(d.get(3).asText(), d.get(4).asText()),
            strings(d.get(5)));
      }
      List<Arrival<String>> arrivals = new ArrayList<>();
      for (com.fasterxml.jackson.databind.JsonNode m : step.get("messages")) {
        arrivals.add(new Arrival<>(m.get(0).asText(), m.get(1).asLong(), entry(m.get(2).asText(), m.get(3).asText())));
      }
      Step<String> result = memory.step(step.get("now").asLong(), keep, retry, arrivals);
      com.fasterxml.jackson.databind.node.ObjectNode o = out.addObject();
      addGiven(o.putArray("released"), result.released);
      addGiven(o.putArray("given"), result.given);
      if (result.nextAt == Long.MAX_VALUE) {
        o.putNull("next");
      } else {
        o.put("next", result.nextAt);
      }
      com.fasterxml.jackson.databind.node.ObjectNode keptNode = o.putObject("kept");
      for (Map.Entry<String, Kept> e : memory.kept.entrySet()) {
        com.fasterxml.jackson.databind.node.ArrayNode r = keptNode.putArray(e.getKey());
        addStrings(r, e.getValue().identity);
        r.add(e.getValue().chosenAt);
      }
      com.fasterxml.jackson.databind.node.ArrayNode heldNode = o.putArray("held");
      for (Held<String> h : memory.held()) {
        heldNode.add(h.message);
      }
    }
    return mapper.writeValueAsString(out);
  }

  private static void addGiven(com.fasterxml.jackson.databind.node.ArrayNode into, List<Given<String>> given) {
    for (Given<String> g : given) {
      com.fasterxml.jackson.databind.node.ArrayNode r = into.addArray();
      r.add(g.message);
      addStrings(r, g.kept);
      r.add(g.waiting);
      r.add(g.firstOfEntry);
    }
  }

  private static String[] strings(com.fasterxml.jackson.databind.JsonNode node) {
    if (node == null || node.isNull()) {
      return null;
    }
    String[] out = new String[node.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = node.get(i).asText();
    }
    return out;
  }

  private static void addStrings(com.fasterxml.jackson.databind.node.ArrayNode into, String[] values) {
    if (values == null) {
      into.addNull();
      return;
    }
    com.fasterxml.jackson.databind.node.ArrayNode a = into.addArray();
    for (String v : values) {
      a.add(v);
    }
  }
}
