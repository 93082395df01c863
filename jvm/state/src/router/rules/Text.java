package router.rules;

import java.util.Comparator;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The text forms the rules compare, as {@code streaming.rules.model} and {@code
 * streaming.rules.transport} define them, character for character: Python's {@code str.strip},
 * {@code str.lower} and code point order, not the JVM's own notions of them.
 */
final class Text {
  private Text() {}

  /** Strings in code point order, as Python sorts {@code str} (UTF-16 order differs above U+FFFF). */
  static final Comparator<String> CODE_POINT_ORDER = Text::compare;

  static int compare(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int x = a.codePointAt(i);
      int y = b.codePointAt(j);
      if (x != y) {
        return Integer.compare(x, y);
      }
      i += Character.charCount(x);
      j += Character.charCount(y);
    }
    return Integer.compare(a.length() - i, b.length() - j);
  }

  /** Python's {@code str.isspace} for one character. */
  static boolean isPythonSpace(char c) {
    switch (c) {
      case '\t': case '\n': case 0x0b: case 0x0c: case '\r':
      case 0x1c: case 0x1d: case 0x1e: case 0x1f: case ' ':
      case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029:
      case 0x202f: case 0x205f: case 0x3000:
        return true;
      default:
        return c >= 0x2000 && c <= 0x200a;
    }
  }

  /** Python's {@code str.strip()}. */
  static String strip(String s) {
    int start = 0;
    int end = s.length();
    while (start < end && isPythonSpace(s.charAt(start))) {
      start++;
    }
    while (end > start && isPythonSpace(s.charAt(end - 1))) {
      end--;
    }
    return s.substring(start, end);
  }

  /** R4, {@code normalize_address}: stripped, no trailing {@code /}, lowercase. */
  static String normalizeAddress(String address) {
    String s = strip(address);
    int end = s.length();
    while (end > 0 && s.charAt(end - 1) == '/') {
      end--;
    }
    return s.substring(0, end).toLowerCase(Locale.ROOT);
  }

  /**
   * R3, {@code canonical_guid}: a GUID in lowercase 8-4-4-4-12 form; text that is no GUID is
   * returned lowercased (loading refuses such values, so they only ever equal themselves).
   */
  static String canonicalGuid(String value) {
    String s = strip(value);
    int start = 0;
    int end = s.length();
    while (start < end && (s.charAt(start) == '{' || s.charAt(start) == '}')) {
      start++;
    }
    while (end > start && (s.charAt(end - 1) == '{' || s.charAt(end - 1) == '}')) {
      end--;
    }
    String compact = s.substring(start, end).replace("-", "").toLowerCase(Locale.ROOT);
    if (compact.length() != 32) {
      return value.toLowerCase(Locale.ROOT);
    }
    for (int i = 0; i < 32; i++) {
      char c = compact.charAt(i);
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
        return value.toLowerCase(Locale.ROOT);
      }
    }
    return compact.substring(0, 8) + "-" + compact.substring(8, 12) + "-" + compact.substring(12, 16)
        + "-" + compact.substring(16, 20) + "-" + compact.substring(20);
  }

  /** The characters of Python's {@code \\s} (and {@code str.isspace}), as a regex class body. */
  private static final String PYTHON_SPACES =
      "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

  // T1, T4: `tcp://host:port` at the start of the service name, ending at `/` or at the end.
  private static final Pattern TCP_PREFIX =
      Pattern.compile(
          "(tcp://[^/:" + PYTHON_SPACES + "]+:[0-9]+)(?:/|$)",
          Pattern.CASE_INSENSITIVE | Pattern.UNICODE_CASE | Pattern.UNIX_LINES);

  /** T1, {@code transport_address}: the next hop a TRANSPORT route derives from a service name. */
  static String transportAddress(String service) {
    Matcher found = TCP_PREFIX.matcher(service);
    return found.lookingAt() ? found.group(1) : null;
  }
}
