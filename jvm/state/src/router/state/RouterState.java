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
 * The router's state inside the streaming query, kept in Spark's state store.
 *
 * <p>The input is one stream of four kinds of rows, told apart by {@code c_kind}:
 *
 * <ul>
 *   <li>{@link #MESSAGE}: a message, with its (instance, conversation_id, origin, service) and its
 *       batch order {@code pos};
 *   <li>{@link #CHOICE}: a record of the choices topic (K2): for one (instance, conversation, origin,
 *       service), the C0 identity of the route a decision kept ({@code c_bid}, {@code
 *       c_route_service}, {@code c_address}) and when it was made ({@code c_at_ms});
 *   <li>{@link #DELAYED}: a record of the delayed topic (D1, D2): a message of the conversation, with
 *       the identity its conversation kept in the {@code c_} identity columns and the time it was
 *       delayed in {@code c_at_ms};
 *   <li>{@link #REQUEST}: a record of the requests topic (B4): for (instance, scope in {@code
 *       origin}, service), whether a MissingRoute request is outstanding ({@code c_asked}) as of
 *       {@code c_at_ms}.
 * </ul>
 *
 * <p>Per (instance, conversation) the state holds the conversation's kept choices, one per (origin,
 * service), and its delayed messages. Each micro-batch first applies the conversation's new choices
 * (the latest per entry wins) and takes in its new delayed records; when the first waiting message
 * is {@code retryMs} old, all waiting messages leave, in their order, ahead of the conversation's
 * new messages (a conversation, not a message, is delayed). Then the new messages leave in {@code
 * pos} order with the kept identity in {@code kept_bid}, {@code kept_route_service} and {@code
 * kept_address}, and {@code waiting} true while messages of their conversation still wait.
 *
 * <p>Per instance one more state row holds the outstanding MissingRoute requests; it emits a
 * status row ({@code pending_requests} set, every message column null) at every micro-batch while
 * a request is outstanding, and once more when the last one ended.
 *
 * <p>A choice is kept {@code keepMs} after it was made. Timeouts are in processing time: they fire
 * at the next micro-batch that runs after they are due (the router's tick makes one every second).
 * The query must run with {@code spark.sql.streaming.noDataMicroBatches.enabled=false}, or Spark
 * would run a batch without data after every batch and a Trigger.AvailableNow query would not end.
 */
public final class RouterState {
  public static final String KIND = "c_kind";
  public static final int MESSAGE = 0;
  public static final int CHOICE = 1;
  public static final int DELAYED = 2;
  public static final int REQUEST = 3;

  public static final String[] GROUP = {"instance", "conversation_id"};
  public static final String[] ENTRY = {"origin", "service"};
  public static final String[] IDENTITY = {"c_bid", "c_route_service", "c_address"};
  public static final String[] KEPT = {"kept_bid", "kept_route_service", "kept_address"};
  public static final String AT = "c_at_ms";
  public static final String ASKED = "c_asked";
  public static final String POSITION = "pos";
  public static final String WAITING = "waiting";
  public static final String PENDING = "pending_requests";

  static final StructType ENTRY_TYPE =
      new StructType()
          .add("origin", DataTypes.StringType)
          .add("service", DataTypes.StringType)
          .add("bid", DataTypes.StringType)
          .add("route_service", DataTypes.StringType)
          .add("address", DataTypes.StringType)
          .add("chosen_ms", DataTypes.LongType, false);

  static final StructType REQUEST_TYPE =
      new StructType()
          .add("scope", DataTypes.StringType)
          .add("service", DataTypes.StringType)
          .add("asked_ms", DataTypes.LongType, false);

  static final StructType PENDING_TYPE =
      new StructType().add("scope", DataTypes.StringType).add("service", DataTypes.StringType);

  /** Where an entry of the state holds its (origin, service): the key of the entry. */
  static final int[] STATE_ENTRY = {0, 1};

  private RouterState() {}

  /** The output schema: the input's columns without the {@code c_} ones, then the state's. */
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
    return out.add(WAITING, DataTypes.BooleanType, true)
        .add(PENDING, DataTypes.createArrayType(PENDING_TYPE, false), true);
  }

  /** The state's schema: kept choices, waiting messages (as they will leave), pending requests. */
  static StructType stateSchema(StructType output) {
    StructType waiting = new StructType().add("message", output, false).add("delayed_ms", DataTypes.LongType, false);
    return new StructType()
        .add("entries", DataTypes.createArrayType(ENTRY_TYPE, false), false)
        .add("waiting", DataTypes.createArrayType(waiting, false), false)
        .add("requests", DataTypes.createArrayType(REQUEST_TYPE, false), false);
  }

  /**
   * Run the processor: {@code keepMs} bounds how long a choice is kept, {@code retryMs} how long a
   * delayed conversation waits before it is routed again.
   */
  public static Dataset<Row> apply(Dataset<Row> rows, long keepMs, long retryMs) {
    StructType input = rows.schema();
    StructType output = outputSchema(input);
    return rows.groupByKey(new KeyOf(input), Encoders.STRING())
        .flatMapGroupsWithState(
            new Step(input, output, keepMs, retryMs),
            OutputMode.Append(),
            Encoders.row(stateSchema(output)),
            Encoders.row(output),
            GroupStateTimeout.ProcessingTimeTimeout());
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

  /** The state key: (instance, conversation), or the instance's requests (SOH, then the instance). */
  static final class KeyOf implements MapFunction<Row, String> {
    private final int kind;
    private final int[] group;

    KeyOf(StructType input) {
      kind = input.fieldIndex(KIND);
      group = indices(input, GROUP);
    }

    @Override
    public String call(Row row) {
      if (row.getInt(kind) == REQUEST) {
        return "\u0001" + row.get(group[0]);
      }
      return joined(row, group);
    }
  }

  /** One key's step; see the class comment. */
  static final class Step implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
    private final long keepMs;
    private final long retryMs;
    private final int kind;
    private final int position;
    private final int at;
    private final int asked;
    private final int outInstance;
    private final int[] entry;
    private final int[] identity;
    private final int[] passed;
    private final int width;

    Step(StructType input, StructType output, long keepMs, long retryMs) {
      this.keepMs = keepMs;
      this.retryMs = retryMs;
      this.kind = input.fieldIndex(KIND);
      this.position = input.fieldIndex(POSITION);
      this.at = input.fieldIndex(AT);
      this.asked = input.fieldIndex(ASKED);
      this.outInstance = output.fieldIndex(GROUP[0]);
      this.entry = indices(input, ENTRY);
      this.identity = indices(input, IDENTITY);
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
      if (key.startsWith("\u0001")) {
        return requests(key.substring(1), rows, state);
      }
      long now = state.getCurrentProcessingTimeMs();
      Map<String, Row> entries = new LinkedHashMap<>();
      List<Row> waiting = new ArrayList<>();
      if (state.exists()) {
        for (Object e : state.get().getList(0)) {
          Row r = (Row) e;
          entries.put(joined(r, STATE_ENTRY), r);
        }
        for (Object w : state.get().getList(1)) {
          waiting.add((Row) w);
        }
      }
      List<Row> messages = new ArrayList<>();
      while (rows.hasNext()) {
        Row row = rows.next();
        int k = row.getInt(kind);
        if (k == MESSAGE) {
          messages.add(row);
        } else if (k == CHOICE && !row.isNullAt(at)) {
          choose(entries, row);
        } else if (k == DELAYED && !row.isNullAt(at)) {
          Object[] values = emitted(row);
          for (int i = 0; i < IDENTITY.length; i++) {
            values[passed.length + i] = row.get(identity[i]);
          }
          waiting.add(RowFactory.create(RowFactory.create(values), row.getLong(at)));
        }
      }
      long next = Long.MAX_VALUE;
      for (Iterator<Row> it = entries.values().iterator(); it.hasNext(); ) {
        long expiry = it.next().getLong(5) + keepMs;
        if (expiry <= now) {
          it.remove();
        } else {
          next = Math.min(next, expiry);
        }
      }
      List<Row> out = new ArrayList<>();
      if (!waiting.isEmpty()) {
        long due = waiting.stream().mapToLong(w -> w.getLong(1)).min().getAsLong() + retryMs;
        if (due <= now) {
          List<Row> leaving = new ArrayList<>();
          for (Row w : waiting) {
            Object[] values = copied(w.getStruct(0));
            values[passed.length + 3] = false;
            leaving.add(RowFactory.create(values));
          }
          leaving.sort(Comparator.comparingLong(r -> r.getLong(position)));
          out.addAll(leaving);
          waiting.clear();
        } else {
          next = Math.min(next, due);
        }
      }
      messages.sort(Comparator.comparingLong(r -> r.getLong(position)));
      for (Row m : messages) {
        Object[] values = emitted(m);
        Row kept = entries.get(joined(m, entry));
        if (kept != null) {
          values[passed.length] = kept.get(2);
          values[passed.length + 1] = kept.get(3);
          values[passed.length + 2] = kept.get(4);
        }
        values[passed.length + 3] = !waiting.isEmpty();
        out.add(RowFactory.create(values));
      }
      if (entries.isEmpty() && waiting.isEmpty()) {
        if (state.exists()) {
          state.remove();
        }
      } else {
        // A Row's array field is a Scala Seq.
        state.update(
            RowFactory.create(
                CollectionConverters.asScala(new ArrayList<>(entries.values())),
                CollectionConverters.asScala(waiting),
                CollectionConverters.asScala(new ArrayList<Row>())));
        state.setTimeoutDuration(Math.max(1L, next - now));
      }
      return out.isEmpty() ? Collections.emptyIterator() : out.iterator();
    }

    /** A choice record: it replaces the kept entry unless that one was chosen later. */
    private void choose(Map<String, Row> entries, Row row) {
      String where = joined(row, entry);
      Row before = entries.get(where);
      if (before == null || row.getLong(at) >= before.getLong(5)) {
        entries.put(
            where,
            RowFactory.create(
                row.get(entry[0]),
                row.get(entry[1]),
                row.get(identity[0]),
                row.get(identity[1]),
                row.get(identity[2]),
                row.getLong(at)));
      }
    }

    /** The output values of an input row: its own columns, then nulls for the state's. */
    private Object[] emitted(Row row) {
      Object[] values = new Object[width];
      for (int i = 0; i < passed.length; i++) {
        values[i] = row.get(passed[i]);
      }
      return values;
    }

    /** The values of a row that is already in the output's shape. */
    private Object[] copied(Row row) {
      Object[] values = new Object[width];
      for (int i = 0; i < width; i++) {
        values[i] = row.get(i);
      }
      return values;
    }

    /** The instance's outstanding MissingRoute requests: apply the records, emit the status row. */
    private Iterator<Row> requests(String name, Iterator<Row> rows, GroupState<Row> state) {
      Map<String, Row> pending = new LinkedHashMap<>();
      if (state.exists()) {
        for (Object r : state.get().getList(2)) {
          Row request = (Row) r;
          pending.put(joined(request, STATE_ENTRY), request);
        }
      }
      List<Row> records = new ArrayList<>();
      rows.forEachRemaining(records::add);
      records.sort(Comparator.comparingLong(r -> r.isNullAt(at) ? Long.MIN_VALUE : r.getLong(at)));
      for (Row r : records) {
        String where = joined(r, entry);
        Row before = pending.get(where);
        long when = r.isNullAt(at) ? 0L : r.getLong(at);
        if (before != null && before.getLong(2) > when) {
          continue;
        }
        if (!r.isNullAt(asked) && r.getBoolean(asked)) {
          pending.put(where, RowFactory.create(r.get(entry[0]), r.get(entry[1]), when));
        } else {
          pending.remove(where);
        }
      }
      if (pending.isEmpty() && !state.exists()) {
        return Collections.emptyIterator();
      }
      List<Row> status = new ArrayList<>();
      for (Row p : pending.values()) {
        status.add(RowFactory.create(p.get(0), p.get(1)));
      }
      Object[] values = new Object[width];
      values[outInstance] = name;
      values[width - 1] = CollectionConverters.asScala(status);
      if (pending.isEmpty()) {
        state.remove();
      } else {
        state.update(
            RowFactory.create(
                CollectionConverters.asScala(new ArrayList<Row>()),
                CollectionConverters.asScala(new ArrayList<Row>()),
                CollectionConverters.asScala(new ArrayList<>(pending.values()))));
        // Fire at the next micro-batch, so that every batch is told what is outstanding.
        state.setTimeoutDuration(1L);
      }
      return Collections.singletonList(RowFactory.create(values)).iterator();
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
