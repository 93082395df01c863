package router.state;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * K2 in the streaming query: the route each conversation chose, kept in Spark's state store.
 *
 * <p>The input is one stream of two kinds of rows, told apart by {@code c_is_choice}:
 *
 * <ul>
 *   <li>messages, each with its (instance, conversation_id, origin, service) and its batch order
 *       {@code pos};
 *   <li>choices read back from the instance's choices topic: for one such key, the C0 identity of
 *       the route a decision kept ({@code c_bid}, {@code c_route_service}, {@code c_address}) and
 *       when it was made ({@code c_at_ms}).
 * </ul>
 *
 * <p>The state is kept per (instance, conversation): one entry per (origin, service) the
 * conversation chose for, so that all of a conversation's messages meet in one group and leave it
 * in {@code pos} order (the Kafka sink then writes them in that order). Each micro-batch first
 * applies the conversation's new choices (the latest per entry wins), then emits its messages with
 * the kept identity in {@code kept_bid}, {@code kept_route_service} and {@code kept_address} (null
 * when nothing is kept). Choice rows are consumed; the columns whose names start with {@code c_}
 * are left out of the output. An entry is kept {@code keepMs} after its choice was made.
 *
 * <p>An entry that no message reads again is removed by an event-time timeout. Event time is the
 * micro-batch's own time ({@code c_seen_at}, the batch timestamp, with a watermark of no delay),
 * so no row is ever late and the timeouts fire at the batches that follow (the router's tick makes
 * one every second). A processing-time timeout would not do: Spark then runs a batch without data
 * after every batch, and a query run with Trigger.AvailableNow would never end.
 */
public final class ChoiceKeeper {
  public static final String KIND = "c_is_choice";
  public static final String[] GROUP = {"instance", "conversation_id"};
  public static final String[] ENTRY = {"origin", "service"};
  public static final String[] CHOICE = {"c_bid", "c_route_service", "c_address"};
  public static final String[] KEPT = {"kept_bid", "kept_route_service", "kept_address"};
  public static final String CHOSEN_AT = "c_at_ms";
  public static final String SEEN_AT = "c_seen_at";
  public static final String POSITION = "pos";

  static final StructType ENTRY_TYPE =
      new StructType()
          .add("origin", DataTypes.StringType)
          .add("service", DataTypes.StringType)
          .add("bid", DataTypes.StringType)
          .add("route_service", DataTypes.StringType)
          .add("address", DataTypes.StringType)
          .add("chosen_ms", DataTypes.LongType, false);

  /** Where an entry of the state holds its (origin, service): the key of the entry. */
  static final int[] STATE_ENTRY = {0, 1};

  static final StructType STATE =
      new StructType().add("entries", DataTypes.createArrayType(ENTRY_TYPE, false), false);

  private ChoiceKeeper() {}

  /** The output schema: the input's columns without the choice-only ones, then the kept identity. */
  public static StructType outputSchema(StructType input) {
    StructType out = new StructType();
    for (StructField f : input.fields()) {
      if (!f.name().startsWith("c_")) {
        out = out.add(f);
      }
    }
    for (String name : KEPT) {
      out = out.add(name, DataTypes.StringType, true);
    }
    return out;
  }

  /**
   * Attach each message's kept choice; {@code keepMs} bounds how long a choice is kept. The rows
   * must have a {@code c_seen_at} timestamp column, the micro-batch's time.
   */
  public static Dataset<Row> attach(Dataset<Row> rows, long keepMs) {
    Dataset<Row> timed = rows.withWatermark(SEEN_AT, "0 seconds");
    StructType input = timed.schema();
    StructType output = outputSchema(input);
    return timed.groupByKey(new KeyOf(input), Encoders.STRING())
        .flatMapGroupsWithState(
            new Keep(input, output, keepMs),
            OutputMode.Append(),
            Encoders.row(STATE),
            Encoders.row(output),
            GroupStateTimeout.EventTimeTimeout());
  }

  /** Joins names with NUL, a character that no instance, database or service name holds. */
  static String joined(Row row, int[] fields) {
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < fields.length; i++) {
      if (i > 0) {
        out.append('\u0000');
      }
      Object v = row.get(fields[i]);
      out.append(v == null ? "" : v.toString());
    }
    return out.toString();
  }

  /** The state key: (instance, conversation). */
  static final class KeyOf implements MapFunction<Row, String> {
    private final int[] group;

    KeyOf(StructType input) {
      group = indices(input, GROUP);
    }

    @Override
    public String call(Row row) {
      return joined(row, group);
    }
  }

  /** The per-conversation step: apply new choices, expire old ones, emit the messages in order. */
  static final class Keep implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
    private final long keepMs;
    private final int kind;
    private final int position;
    private final int chosenAt;
    private final int[] entry;
    private final int[] choice;
    private final int[] passed;
    private final int width;

    Keep(StructType input, StructType output, long keepMs) {
      this.keepMs = keepMs;
      this.kind = input.fieldIndex(KIND);
      this.position = input.fieldIndex(POSITION);
      this.chosenAt = input.fieldIndex(CHOSEN_AT);
      this.entry = indices(input, ENTRY);
      this.choice = indices(input, CHOICE);
      List<Integer> kept = new ArrayList<>();
      for (int i = 0; i < input.fields().length; i++) {
        if (!input.fields()[i].name().startsWith("c_")) {
          kept.add(i);
        }
      }
      this.passed = kept.stream().mapToInt(Integer::intValue).toArray();
      this.width = output.fields().length;
    }

    @Override
    public Iterator<Row> call(String key, Iterator<Row> rows, GroupState<Row> state) {
      long now = state.getCurrentProcessingTimeMs();
      // (origin NUL service) -> entry row of ENTRY_TYPE, in insertion order.
      Map<String, Row> entries = new LinkedHashMap<>();
      if (state.exists()) {
        for (Object e : state.get().getList(0)) {
          Row r = (Row) e;
          entries.put(joined(r, STATE_ENTRY), r);
        }
      }
      List<Row> messages = new ArrayList<>();
      while (rows.hasNext()) {
        Row row = rows.next();
        if (!row.getBoolean(kind)) {
          messages.add(row);
          continue;
        }
        if (row.isNullAt(chosenAt)) {
          continue;
        }
        String at = joined(row, entry);
        Row before = entries.get(at);
        if (before == null || row.getLong(chosenAt) >= before.getLong(5)) {
          entries.put(
              at,
              RowFactory.create(
                  row.get(entry[0]),
                  row.get(entry[1]),
                  row.get(choice[0]),
                  row.get(choice[1]),
                  row.get(choice[2]),
                  row.getLong(chosenAt)));
        }
      }
      long firstExpiry = Long.MAX_VALUE;
      for (Iterator<Row> it = entries.values().iterator(); it.hasNext(); ) {
        long expiry = it.next().getLong(5) + keepMs;
        if (expiry <= now) {
          it.remove();
        } else {
          firstExpiry = Math.min(firstExpiry, expiry);
        }
      }
      if (entries.isEmpty()) {
        if (state.exists()) {
          state.remove();
        }
      } else {
        // A Row's array field is a Scala Seq.
        state.update(RowFactory.create(CollectionConverters.asScala(new ArrayList<>(entries.values()))));
        state.setTimeoutTimestamp(Math.max(firstExpiry, state.getCurrentWatermarkMs() + 1));
      }
      messages.sort(Comparator.comparingLong(r -> r.getLong(position)));
      List<Row> out = new ArrayList<>(messages.size());
      for (Row m : messages) {
        Object[] values = new Object[width];
        for (int i = 0; i < passed.length; i++) {
          values[i] = m.get(passed[i]);
        }
        Row kept = entries.get(joined(m, entry));
        if (kept != null) {
          values[passed.length] = kept.get(2);
          values[passed.length + 1] = kept.get(3);
          values[passed.length + 2] = kept.get(4);
        }
        out.add(RowFactory.create(values));
      }
      return out.isEmpty() ? Collections.emptyIterator() : out.iterator();
    }
  }

  static int[] indices(StructType schema, String[] names) {
    int[] out = new int[names.length];
    for (int i = 0; i < names.length; i++) {
      out[i] = schema.fieldIndex(names[i]);
    }
    return out;
  }
}
