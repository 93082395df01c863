package router.state;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import router.Cases;

/**
 * {@link ConversationMemory} keeps a conversation's memory (K2, D1, D2) as {@code
 * streaming.rules.memory.Conversation.step} does: each generated event sequence is replayed
 * ({@link ConversationMemory#replayJson}), and every step must give what the Python replay gave:
 * the held messages released, what each new message is told, when to look again, and the memory
 * left behind (kept entries compared as a map: their order is not part of the contract).
 */
class ConversationMemoryCasesTest {

  @Test
  void everySequenceIsReplayedAsConversationStepReplaysIt() throws IOException {
    ObjectMapper mapper = new ObjectMapper();
    List<String> wrong = new ArrayList<>();
    int total = 0;
    for (JsonNode c : Cases.read("memory.json").get("cases")) {
      total++;
      JsonNode got = mapper.readTree(ConversationMemory.replayJson(c.get("sequence").toString()));
      JsonNode want = c.get("expected");
      if (!got.equals(want)) {
        wrong.add("sequence " + c.get("sequence") + ": reference " + want + ", JVM " + got);
      }
    }
    assertTrue(total >= 100, "expected hundreds of generated sequences, got " + total);
    int cases = total;
    assertTrue(wrong.isEmpty(), () -> Cases.failure(wrong, cases));
  }
}
