package router.naming;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

import router.contract.Contract;

/**
 * The JVM twin of {@code streaming.topics}: the destination topic names the batch gives each
 * decided message, equal byte for byte to the Python ones (tested against them).
 *
 * <p>The decision ({@code router.spark.DecisionPass}) names each message's destination with these, once
 * per destination and pass (it keeps the names it made). The scheme itself (escaping, cut parts,
 * cut names) is documented in {@code streaming/topics.py}, its one home; its constants come from
 * the contract ({@link Contract}), and each function takes its arguments in the Python one's
 * order, the prefix last. A null part gives a null name.
 */
public final class TopicNames {
  static final int MAX_TOPIC = Contract.MAX_TOPIC;
  static final int MAX_PART = Contract.MAX_PART;
  static final int HASH_DIGITS = Contract.HASH_DIGITS;
  static final String PART_CUT_MARK = Contract.PART_CUT_MARK;
  static final String TOPIC_CUT_MARK = Contract.TOPIC_CUT_MARK;
  private static final char[] HEX = "0123456789abcdef".toCharArray();

  private TopicNames() {}

  /** {@code streaming.topics.queue_topic}: a local service's queue. */
  public static String queue(String instance, String database, String service, String prefix) {
    if (prefix == null || instance == null || database == null || service == null) {
      return null;
    }
    return topic(prefix, escape(instance), Contract.QUEUE_PART, escape(database), escape(service));
  }

  /** {@code streaming.topics.network_topic}, of an address already normalized (R4). */
  public static String network(String normalizedAddress, String prefix) {
    if (prefix == null || normalizedAddress == null) {
      return null;
    }
    return topic(prefix, Contract.NETWORK_PART, escape(normalizedAddress));
  }

  /** {@code streaming.topics.escape}: one name in topic-safe characters, injectively. */
  public static String escape(String part) {
    if (part == null) {
      return null;
    }
    byte[] bytes = part.getBytes(StandardCharsets.UTF_8);
    StringBuilder out = new StringBuilder(bytes.length);
    for (byte b : bytes) {
      int v = b & 0xff;
      if ((v >= 'A' && v <= 'Z') || (v >= 'a' && v <= 'z') || (v >= '0' && v <= '9')) {
        out.append((char) v);
      } else {
        out.append('-').append(HEX[v >> 4]).append(HEX[v & 0xf]);
      }
    }
    if (out.length() > MAX_PART) {
      out.setLength(MAX_PART - PART_CUT_MARK.length() - HASH_DIGITS);
      out.append(PART_CUT_MARK).append(hash(bytes));
    }
    return out.length() == 0 ? "-" : out.toString();
  }

  private static String topic(String prefix, String... parts) {
    StringBuilder name = new StringBuilder(prefix);
    for (String part : parts) {
      name.append('.').append(part);
    }
    if (name.length() <= MAX_TOPIC) {
      return name.toString();
    }
    String whole = name.toString();
    return whole.substring(0, MAX_TOPIC - TOPIC_CUT_MARK.length() - HASH_DIGITS)
        + TOPIC_CUT_MARK
        + hash(whole.getBytes(StandardCharsets.US_ASCII));
  }

  private static String hash(byte[] data) {
    byte[] digest;
    try {
      digest = MessageDigest.getInstance("SHA-256").digest(data);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("the JVM has no SHA-256", e);
    }
    char[] out = new char[HASH_DIGITS];
    for (int i = 0; i < HASH_DIGITS / 2; i++) {
      out[2 * i] = HEX[(digest[i] >> 4) & 0xf];
      out[2 * i + 1] = HEX[digest[i] & 0xf];
    }
    return new String(out);
  }
}
