package router.naming;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.Test;
import router.Cases;

/**
 * {@link TopicNames} names exactly as {@code streaming.topics} does, byte for byte: for each
 * (name, database, service) of the hard cases and the generated ones, {@code escape(name)}, then
 * under each (prefix, instance) place {@code network(prefix, name)} and {@code queue(prefix,
 * instance, database, service)}; a null part gives a null name.
 */
class TopicNamesCasesTest {

  @Test
  void everyNameIsTheOneStreamingTopicsGives() {
    JsonNode root = Cases.read("topics.json");
    List<String> wrong = new ArrayList<>();
    int total = 0;
    for (JsonNode c : root.get("cases")) {
      total++;
      String name = Cases.text(c, "name");
      List<String> got = new ArrayList<>();
      got.add(TopicNames.escape(name));
      for (JsonNode place : root.get("places")) {
        String prefix = place.get(0).asText();
        got.add(TopicNames.network(name, prefix));
        String instance = place.get(1).asText();
        got.add(TopicNames.queue(instance, Cases.text(c, "database"), Cases.text(c, "service"), prefix));
      }
      List<String> want = Cases.texts(c.get("expected"));
      if (!got.equals(want)) {
        wrong.add("case " + c + ": JVM " + got);
      }
    }
    assertTrue(total >= 500, "expected hundreds of names, got " + total);
    int cases = total;
    assertTrue(wrong.isEmpty(), () -> Cases.failure(wrong, cases));
  }
}
