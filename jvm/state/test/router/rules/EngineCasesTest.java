package router.rules;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.Test;
import router.Cases;

/**
 * {@link Engine#decide} takes every single decision the Python reference took ({@code
 * streaming.rules.engine.decide_message}): those of every scenario of tests/scenarios and of the
 * agreement tests' generated batches, each with the snapshot JSON the job hands the JVM, the
 * message, the pending requests (B4), the kept choice (K2) and the rotation counters (C5, M3).
 * Every field of the decision must be equal, and so must the identity it keeps and the counters it
 * moved.
 */
class EngineCasesTest {
  @Test
  void everyCaseIsDecidedAsTheReferenceDecidedIt() {
    JsonNode root = Cases.read("rules.json");
    String instance = root.get("instance").asText();
    List<Snapshot> snapshots = new ArrayList<>();
    for (JsonNode json : root.get("snapshots")) {
      snapshots.add(Snapshot.parse(json.asText()));
    }
    List<String> wrong = new ArrayList<>();
    Set<Object> outcomes = new HashSet<>();
    int total = 0;
    for (JsonNode c : root.get("cases")) {
      total++;
      Map<String, Object> want = expected(c.get("expected"));
      Map<String, Object> got = decide(snapshots.get(c.get("snapshot").asInt()).site(instance), c);
      outcomes.add(want.get("outcome"));
      if (!got.equals(want)) {
        wrong.add(c.get("source").asText() + ", message " + c.get("message") + ": " + differences(want, got));
      }
    }
    assertTrue(total >= 1000 && outcomes.size() == 6, "expected thousands of cases of all six outcomes, got "
        + total + " of " + outcomes);
    int cases = total;
    assertTrue(wrong.isEmpty(), () -> Cases.failure(wrong, cases));
  }

  /** The decision of case {@code c} at {@code site} by {@link Engine#decide}, with the counters it moved. */
  private static Map<String, Object> decide(Snapshot.Site site, JsonNode c) {
    JsonNode m = c.get("message");
    JsonNode ttl = m.get("time_to_live_s");
    Message message =
        new Message(
            Cases.text(m, "conversation_id"),
            Cases.text(m, "service"),
            Cases.text(m, "origin"),
            Cases.text(m, "broker_instance"),
            m.get("from_target").asBoolean(),
            m.get("hops_remaining").asInt(),
            ttl.isNull() ? null : ttl.asDouble(),
            m.get("size_bytes").asLong());
    Set<String> pending = new HashSet<>();
    for (JsonNode p : c.get("pending")) {
      pending.add(p.get(0).asText() + "\u0000" + p.get(1).asText());
    }
    JsonNode k = c.get("kept");
    Route.Identity kept = k.isNull() ? null : Route.Identity.kept(k.get(0).asText(), k.get(1).asText(), k.get(2).asText());
    List<String> counters = new ArrayList<>();
    for (Map.Entry<String, JsonNode> e : c.get("rotation").properties()) {
      counters.add(site.key + "\u0000" + e.getKey() + "\u0000" + e.getValue().asInt());
    }
    Rotation rotation = new Rotation(counters.toArray(new String[0]));
    Decision d = Engine.decide(message, site, pending, kept, rotation);
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("outcome", d.outcome);
    out.put("database", d.database);
    out.put("address", d.address);
    out.put("route", d.route);
    out.put("match_step", d.matchStep);
    out.put("choice_step", d.choiceStep);
    out.put("reason", d.reason);
    out.put("requests", d.requests);
    out.put("hops_remaining", d.hopsRemaining);
    out.put("scope", d.scope);
    out.put(
        "remembered",
        d.remembered == null
            ? null
            : List.of(d.remembered.brokerInstance, d.remembered.service, d.remembered.address));
    Map<String, Integer> moved = new TreeMap<>();
    for (String entry : rotation.advanced()) {
      String key = entry.substring(site.key.length() + 1, entry.lastIndexOf('\u0000'));
      moved.put(key, Integer.parseInt(entry.substring(entry.lastIndexOf('\u0000') + 1)));
    }
    out.put("rotation", moved);
    return out;
  }

  /** What the reference decided, in the form {@link #decide} gives. */
  private static Map<String, Object> expected(JsonNode e) {
    Map<String, Object> out = new LinkedHashMap<>();
    for (String field :
        new String[] {"outcome", "database", "address", "route", "match_step", "choice_step", "reason", "requests"}) {
      out.put(field, Cases.text(e, field));
    }
    out.put("hops_remaining", e.get("hops_remaining").isNull() ? null : e.get("hops_remaining").asInt());
    out.put("scope", Cases.text(e, "scope"));
    out.put("remembered", e.get("remembered").isNull() ? null : Cases.texts(e.get("remembered")));
    Map<String, Integer> moved = new TreeMap<>();
    for (Map.Entry<String, JsonNode> entry : e.get("rotation").properties()) {
      moved.put(entry.getKey(), entry.getValue().asInt());
    }
    out.put("rotation", moved);
    return out;
  }

  private static String differences(Map<String, Object> want, Map<String, Object> got) {
    StringBuilder out = new StringBuilder();
    for (Map.Entry<String, Object> e : want.entrySet()) {
      Object have = got.get(e.getKey());
      if (e.getValue() == null ? have != null : !e.getValue().equals(have)) {
        out.append(e.getKey()).append(" reference ").append(e.getValue()).append(", JVM ").append(have).append("; ");
      }
    }
    return out.toString();
  }
}
