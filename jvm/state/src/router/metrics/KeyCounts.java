package router.metrics;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.functions;

/**
 * An aggregate that counts its rows by a key: {@code router_key_counts(key)} gives each distinct
 * key with its count, one {@code key TAB count} line per key, sorted by key.
 *
 * <p>A micro-batch's observed metrics ({@code Dataset.observe}) count its messages with it by
 * instance, outcome and reason, in the one pass that writes them: a count per combination would
 * need a {@code count_if} per instance, outcome and reason, each a comparison per row, where this
 * is one hash lookup per row and handles any reason the rules add. A null key is not counted.
 */
public final class KeyCounts extends Aggregator<String, KeyCounts.Counts, String> {
  private static final long serialVersionUID = 1L;
  /** The name it is registered under ({@link #register}). */
  public static final String FUNCTION = "router_key_counts";

  /** The counts so far, by key. */
  public static final class Counts implements Serializable {
    private static final long serialVersionUID = 1L;
    final HashMap<String, long[]> byKey = new HashMap<>();

    void add(String key, long count) {
      long[] slot = byKey.get(key);
      if (slot == null) {
        byKey.put(key, new long[] {count});
      } else {
        slot[0] += count;
      }
    }
  }

  /** Register the aggregate with {@code spark}'s SQL functions as {@link #FUNCTION}. */
  public static void register(SparkSession spark) {
    spark.udf().register(FUNCTION, functions.udaf(new KeyCounts(), Encoders.STRING()));
  }

  @Override
  public Counts zero() {
    return new Counts();
  }

  @Override
  public Counts reduce(Counts counts, String key) {
    if (key != null) {
      counts.add(key, 1);
    }
    return counts;
  }

  @Override
  public Counts merge(Counts a, Counts b) {
    for (Map.Entry<String, long[]> e : b.byKey.entrySet()) {
      a.add(e.getKey(), e.getValue()[0]);
    }
    return a;
  }

  @Override
  public String finish(Counts counts) {
    StringBuilder out = new StringBuilder();
    for (Map.Entry<String, long[]> e : new TreeMap<>(counts.byKey).entrySet()) {
      out.append(e.getKey()).append('\t').append(e.getValue()[0]).append('\n');
    }
    return out.toString();
  }

  @Override
  public Encoder<Counts> bufferEncoder() {
    return Encoders.javaSerialization(Counts.class);
  }

  @Override
  public Encoder<String> outputEncoder() {
    return Encoders.STRING();
  }
}
