package router;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The case files the Python reference wrote ({@code python -m tests.jvm_cases DIR}) for the JUnit
 * tests to replay: the folder is the system property {@code router.cases} (the pom passes it on).
 */
public final class Cases {
  /** How many differing cases a failure spells out. */
  public static final int SHOWN = 5;

  private Cases() {}

  /** The case file {@code name} of the folder, parsed; a missing one fails saying how to make it. */
  public static JsonNode read(String name) {
    String folder = System.getProperty("router.cases");
    if (folder == null || folder.isEmpty()) {
      throw new IllegalStateException(
          "expected the system property router.cases to name the folder of the case files; run "
              + "`make test-jvm`, or `python -m tests.jvm_cases DIR` then `mvn -f jvm/state/pom.xml test "
              + "-Drouter.cases=DIR`");
    }
    Path file = Path.of(folder, name);
    if (!Files.isRegularFile(file)) {
      throw new IllegalStateException(
          "expected the case file " + file + ", found none; write it with `python -m tests.jvm_cases "
              + folder + "` (`make test-jvm` does)");
    }
    try {
      return new ObjectMapper().readTree(file.toFile());
    } catch (IOException e) {
      throw new UncheckedIOException("the case file " + file + " is not valid JSON", e);
    }
  }

  /** A text field's value, or null for JSON null or a missing field. */
  public static String text(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? null : value.asText();
  }

  /** The texts of a JSON array, nulls kept. */
  public static List<String> texts(JsonNode array) {
    List<String> out = new ArrayList<>();
    for (JsonNode value : array) {
      out.add(value.isNull() ? null : value.asText());
    }
    return out;
  }

  /** The failure message of {@code wrong} differing cases out of {@code total}: the first few. */
  public static String failure(List<String> wrong, int total) {
    return wrong.size() + " of " + total + " cases differ from the Python reference; the first:\n  "
        + String.join("\n  ", wrong.subList(0, Math.min(SHOWN, wrong.size())));
  }
}
