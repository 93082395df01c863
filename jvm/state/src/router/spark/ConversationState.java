package router.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import router.contract.Contract;
import router.metrics.HeldCounts;
import router.state.ConversationMemory;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The router's conversation memory inside the streaming query, kept in Spark's state store.
 *
 * <p>A {@code transformWithState} step keyed by {@code c_key} (instance and conversation endpoint; a
 * record that does not decode has a key of its own and no state). Per key it keeps a {@link
 * ConversationMemory}, whose rules are those of {@code streaming.rules.memory}; this class only
 * moves rows in and out of it. The input is one stream of three kinds of rows, told apart by
 * {@code c_kind}:
 *
 * <ul>
 *   <li>{@link #MESSAGE}: a new message, with its entry ({@code origin}, {@code service}) and its
 *       batch order {@code pos};
 *   <li>{@link #CHOICE}: a record of the choices topic (K2): for one entry, the C0 identity a
 *       decision kept ({@code c_bid}, {@code c_route_service}, {@code c_address}), when it was
 *       made ({@code c_at_ms}) and the order it was recorded in ({@code pos});
 *   <li>{@link #DELAYED}: a record of the delayed topic (D1, D2): a message of the conversation,
 *       with the identity its entry kept in the {@code c_} identity columns and the time it was
 *       delayed in {@code c_at_ms}.
 * </ul>
 *
 * <p>What leaves, per key and micro-batch: the held messages that fell due, in order, then the new
 * messages in {@code pos} order, each with the kept identity ({@code kept_bid}, {@code
 * kept_route_service}, {@code kept_address}), {@code waiting} (messages of the conversation are
 * still held: it waits behind them) and {@code first_of_entry} (the first of its entry to leave in
 * this batch, whose choice the batch records on the choices topic), and {@code batch_ms}, the
 * micro-batch's time (the decision's "now": a column, not a constant, so that the batch's generated
 * code is the same from one batch to the next and compiled once).
 *
 * <p>K2 at once: given what the batch is decided with ({@link DecisionInputs}), the processor runs
 * the decision's own pass ({@link ProcessorPass}) over the messages as they leave, in the order the
 * decision will read them in the same task, unless the batch is decided in one pass ({@link
 * ProcessorPass#forProcessor}). A message that is the first of its entry and makes a choice has it
 * kept here, chosen at the batch's time, as {@code streaming.scenario}'s timeline keeps it, and leaves
 * with {@code first_of_entry} false: no record goes round the choices topic for it.
 *
 * <p>Each key with a memory has one timer, in processing time, at the instant its memory next
 * changes by itself (a kept choice expires, a held conversation falls due), less {@link
 * #DUE_MARGIN_MS}; the timer fires at the first micro-batch that runs from then on (the router's
 * tick makes one every second). Spark keeps the timers in an index by time, so a micro-batch reads
 * only the timers that fell due, not every key's state, as {@code flatMapGroupsWithState}'s
 * timeouts did: that scan cost about 4 µs of CPU per key held, in every micro-batch (measured:
 * 200 ms per partition with 100,000 conversations held). The query must run with {@code
 * spark.sql.streaming.noDataMicroBatches.enabled=false}, or Spark would run a batch without data
 * after every batch and a bounded run would not end.
 *
 * <p>A key's state is written only when its memory changed in the batch ({@link
 * ConversationMemory#changed}): a later message of a conversation whose choice is kept reads the
 * state and leaves it as it was, rather than writing the same memory back (a RocksDB put, and a
 * line of the checkpoint's changelog, per conversation and batch). Measured over replays of
 * 300,000 messages whose conversations' four messages fall in different batches of 100,000 (one
 * JVM, alternating): the second and third batches took 2.19 s on average instead of 2.37 s, though
 * the spread of single batches (2.01-2.61 s) was as wide as the difference.
 */
public final class ConversationState {
  public static final String KEY = Contract.STATE_KEY_COLUMN;
  public static final String KIND = Contract.STATE_KIND_COLUMN;
  public static final int MESSAGE = Contract.STATE_KIND_MESSAGE;
  public static final int CHOICE = Contract.STATE_KIND_CHOICE;
  public static final int DELAYED = Contract.STATE_KIND_DELAYED;

  public static final String[] ENTRY = Contract.ENTRY_COLUMNS;
  public static final String[] IDENTITY = Contract.STATE_IDENTITY_COLUMNS;
  public static final String[] KEPT = Contract.KEPT_COLUMNS;
  public static final String AT = Contract.STATE_AT_COLUMN;
  public static final String POSITION = Contract.POSITION_COLUMN;
  /** The message id: D1 holds a message once, however many copies of it are read back. */
  public static final String ID = Contract.ID_COLUMN;
  public static final String WAITING = Contract.WAITING_COLUMN;
  public static final String FIRST = Contract.FIRST_COLUMN;
  public static final String BATCH_TIME = Contract.BATCH_TIME_COLUMN;
  /**
   * D2: how long before its due time a micro-batch may release a conversation. Micro-batches start
   * a few tens of milliseconds after their trigger's tick, and a due time, counted from the batch
   * that delayed the message, falls as far after a later tick: without the margin a batch starting
   * a little before the due time would leave it to the next one, a whole trigger later.
   */
  static final long DUE_MARGIN_MS = 100;

  static final StructType ENTRY_TYPE =
      new StructType()
          .add("origin", DataTypes.StringType)
          .add("service", DataTypes.StringType)
          .add("bid", DataTypes.StringType)
          .add("route_service", DataTypes.StringType)
          .add("address", DataTypes.StringType)
          .add("chosen_ms", DataTypes.LongType, false);

  private ConversationState() {}

  /** The output schema: the input's columns without the {@code c_} ones, then the memory's. */
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
        .add(FIRST, DataTypes.BooleanType, true)
        .add(BATCH_TIME, DataTypes.LongType, true);
  }

  /**
   * The name of the state variable that holds a key's memory; {@code streaming.spark.state.read_state}
   * reads it by this name, from here.
   */
  public static final String STATE = Contract.STATE_VARIABLE;

  /**
   * The state's schema: kept choices, held messages (as they will leave) with when delayed, and the
   * instant of the key's timer.
   */
  static StructType stateSchema(StructType output) {
    StructType held =
        new StructType().add("message", output, false).add("delayed_ms", DataTypes.LongType, false);
    return new StructType()
        .add("entries", DataTypes.createArrayType(ENTRY_TYPE, false), false)
        .add("waiting", DataTypes.createArrayType(held, false), false)
        .add("timer_ms", DataTypes.LongType, false);
  }

  /**
   * Run the processor: {@code keepMs} bounds how long a choice is kept, {@code retryMs} how long a
   * delayed conversation waits before it is routed again. Its choices reach it through the choices
   * topic alone.
   */
  public static Dataset<Row> apply(Dataset<Row> rows, long keepMs, long retryMs) {
    return apply(rows, keepMs, retryMs, null);
  }

  /**
   * Run the processor, keeping the choices its messages make at once (see the class comment) when
   * {@code inputs}, what the batch is decided with, allows it ({@link ProcessorPass#forProcessor}).
   */
  public static Dataset<Row> apply(Dataset<Row> rows, long keepMs, long retryMs, DecisionInputs inputs) {
    return apply(rows, keepMs, retryMs, inputs, null);
  }

  /**
   * Run the processor as {@link #apply(Dataset, long, long, DecisionInputs)} does, adding how the
   * delayed messages it holds change to {@code held} (for the router's metrics), when it is given.
   */
  public static Dataset<Row> apply(
      Dataset<Row> rows, long keepMs, long retryMs, DecisionInputs inputs, HeldCounts held) {
    StructType input = rows.schema();
    StructType output = outputSchema(input);
    // Grouped by the key column itself, not by a function of each row: a function would have every
    // row made into a Java Row before the shuffle only to read its key (measured: the stage before
    // the shuffle used 0.50-0.56 s of CPU a 100,000-message batch instead of 0.60-0.64). The key
    // is hashed as before, to the same partition. It is never null, whatever the input's column
    // says (its rows always have a key): the state store keeps the key's schema from the first run
    // and refuses a later run's that allows nulls where the first did not.
    Column key = functions.coalesce(rows.col(KEY), functions.lit("")).as(KEY);
    return rows.groupBy(key)
        .as(Encoders.STRING(), Encoders.row(input))
        .transformWithState(
            new Processor(input, output, keepMs, retryMs, inputs, held),
            TimeMode.ProcessingTime(),
            OutputMode.Append(),
            Encoders.row(output));
  }

  /** The stateful processor Spark runs for each key's rows; see the class comment. */
  static final class Processor extends StatefulProcessor<String, Row, Row> {
    private static final long serialVersionUID = 1L;
    private static final long NO_TIMER = -1L;
    private final long keepMs;
    private final long retryMs;
    private final int kind;
    private final int position;
    private final int id;
    private final int at;
    private final int[] entry;
    private final int[] identity;
    private final int[] passed;
    private final int outOrigin;
    private final int outService;
    private final int outPosition;
    private final int outId;
    private final int width;
    private final StructType stateType;
    /** What the batch is decided with, shipped with each batch's tasks; null: choices come from the topic only. */
    private final DecisionInputs inputs;
    /** Where the columns the rules read are in a leaving message, or null when it lacks one. */
    private final ProcessorPass.LeavingColumns rules;
    /** Where the changes of the delayed messages held go (the router's metrics), or null. */
    private final HeldCounts held;
    private transient ValueState<Row> state;
    /** The task's pass over its leaving messages (K2 kept at once), once looked for; null: none. */
    private transient ProcessorPass pass;
    private transient boolean passLooked;

    Processor(
        StructType input, StructType output, long keepMs, long retryMs, DecisionInputs inputs, HeldCounts held) {
      this.held = held;
      this.keepMs = keepMs;
      this.retryMs = retryMs;
      this.inputs = inputs;
      this.rules = ProcessorPass.LeavingColumns.of(output);
      this.kind = input.fieldIndex(KIND);
      this.position = input.fieldIndex(POSITION);
      this.id = input.fieldIndex(ID);
      this.at = input.fieldIndex(AT);
      this.entry = indices(input, ENTRY);
      this.identity = indices(input, IDENTITY);
      List<Integer> kept = new ArrayList<>();
      for (int i = 0; i < input.fields().length; i++) {
        if (!input.fields()[i].name().startsWith("c_")) {
          kept.add(i);
        }
      }
      this.passed = kept.stream().mapToInt(Integer::intValue).toArray();
      this.outOrigin = output.fieldIndex(ENTRY[0]);
      this.outService = output.fieldIndex(ENTRY[1]);
      this.outPosition = output.fieldIndex(POSITION);
      this.outId = output.fieldIndex(ID);
      this.width = output.fields().length;
      this.stateType = stateSchema(output);
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
      state = getHandle().getValueState(STATE, Encoders.row(stateType), TTLConfig.NONE());
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(
        String key, scala.collection.Iterator<Row> rows, TimerValues timers) {
      return step(key, CollectionConverters.asJava(rows), timers.getCurrentProcessingTimeInMs(), NO_TIMER);
    }

    /** A key's timer fell due: its memory steps with no new rows (Spark deletes the timer after). */
    @Override
    public scala.collection.Iterator<Row> handleExpiredTimer(
        String key, TimerValues timers, ExpiredTimerInfo expired) {
      return step(
          key, Collections.emptyIterator(), timers.getCurrentProcessingTimeInMs(), expired.getExpiryTimeInMs());
    }

    private scala.collection.Iterator<Row> step(String key, Iterator<Row> rows, long now, long fired) {
      long due = now + DUE_MARGIN_MS; // what falls due by then leaves in this batch
      Row saved = state.get(); // null when the key has no memory: one lookup, not exists() then get()
      ConversationMemory<Object[]> memory = restore(saved);
      List<ConversationMemory.Arrival<Object[]>> arrivals = new ArrayList<>();
      List<ConversationMemory.Choice> choices = new ArrayList<>();
      while (rows.hasNext()) {
        Row row = rows.next();
        int k = row.getInt(kind);
        if (k == MESSAGE) {
          arrivals.add(
              new ConversationMemory.Arrival<>(
                  emitted(row), row.getLong(position), entryOf(row.get(entry[0]), row.get(entry[1]))));
        } else if (k == CHOICE && !row.isNullAt(at) && !row.isNullAt(identity[2])) {
          choices.add(
              new ConversationMemory.Choice(
                  entryOf(row.get(entry[0]), row.get(entry[1])),
                  identityOf(row),
                  row.getLong(at),
                  row.getLong(position)));
        } else if (k == DELAYED && !row.isNullAt(at)) {
          memory.hold(
              emitted(row),
              row.isNullAt(id) ? "" : row.getString(id),
              row.getLong(position),
              row.getLong(at),
              entryOf(row.get(entry[0]), row.get(entry[1])),
              identityOf(row));
        }
      }
      memory.rememberAll(choices);
      ConversationMemory.Step<Object[]> step = memory.step(due, keepMs, retryMs, arrivals);
      ProcessorPass pass = pass();
      List<Row> out = new ArrayList<>(step.released.size() + step.given.size());
      for (ConversationMemory.Given<Object[]> g : step.released) {
        out.add(leaving(g, now, keepsChoice(pass, memory, g, now)));
      }
      for (ConversationMemory.Given<Object[]> g : step.given) {
        out.add(leaving(g, now, keepsChoice(pass, memory, g, now)));
      }
      long timer = saved == null ? NO_TIMER : saved.getLong(2);
      // The memory's next change (with what the pass kept), less the margin by which a batch may
      // release early; later than now.
      long at = now + Math.max(1L, memory.nextAt(keepMs, retryMs) - due);
      if (held != null && memory.changed()) {
        held.add(new HeldCounts.Change(HeldCounts.instanceOf(key), heldSince(saved), heldSince(memory)));
      }
      save(memory, saved != null, at, timer == fired ? NO_TIMER : timer);
      return CollectionConverters.asScala(out.iterator());
    }

    /** When each message the saved state holds was delayed (D1). */
    private static long[] heldSince(Row saved) {
      if (saved == null) {
        return new long[0];
      }
      List<Object> waiting = saved.getList(1);
      long[] out = new long[waiting.size()];
      for (int i = 0; i < out.length; i++) {
        out[i] = ((Row) waiting.get(i)).getLong(1);
      }
      return out;
    }

    /** When each message the memory holds was delayed (D1). */
    private static long[] heldSince(ConversationMemory<Object[]> memory) {
      List<ConversationMemory.Held<Object[]>> waiting = memory.held();
      long[] out = new long[waiting.size()];
      for (int i = 0; i < out.length; i++) {
        out[i] = waiting.get(i).delayedAt;
      }
      return out;
    }

    private ProcessorPass pass() {
      if (!passLooked) {
        passLooked = true;
        pass = rules == null || keepMs <= 0 ? null : ProcessorPass.forProcessor(inputs);
      }
      return pass;
    }

    /**
     * K2: decide {@code g} in the task's pass (the decision will decide it so again) and, when it
     * is the first of its entry to leave and its decision keeps a choice anew, keep that choice now,
     * chosen at the batch's time. True when it was kept here: the message then leaves as not the
     * first of its entry, so the batch writes no choice record for it.
     */
    private boolean keepsChoice(
        ProcessorPass pass, ConversationMemory<Object[]> memory, ConversationMemory.Given<Object[]> g, long now) {
      if (pass == null) {
        return false;
      }
      String[] chosen = pass.choose(rules, g.message, now, g.waiting, g.kept);
      if (chosen == null || !g.firstOfEntry) {
        return false;
      }
      memory.remember(entryOf(g.message[outOrigin], g.message[outService]), chosen, now);
      return true;
    }

    /** A message as it leaves: its values, then what the memory tells it, and the batch's time. */
    private Row leaving(ConversationMemory.Given<Object[]> g, long now, boolean choiceKept) {
      Object[] values = g.message.clone();
      int base = passed.length;
      for (int i = 0; i < KEPT.length; i++) {
        values[base + i] = g.kept == null ? null : g.kept[i];
      }
      values[base + KEPT.length] = g.waiting;
      values[base + KEPT.length + 1] = g.firstOfEntry && !choiceKept;
      values[base + KEPT.length + 2] = now;
      return RowFactory.create(values);
    }

    private ConversationMemory<Object[]> restore(Row saved) {
      ConversationMemory<Object[]> memory = new ConversationMemory<>();
      if (saved == null) {
        return memory;
      }
      for (Object e : saved.getList(0)) {
        Row r = (Row) e;
        memory.remember(
            entryOf(r.get(0), r.get(1)),
            new String[] {r.getString(2), r.getString(3), r.getString(4)},
            r.getLong(5));
      }
      for (Object w : saved.getList(1)) {
        Row held = (Row) w;
        Row message = held.getStruct(0);
        Object[] values = new Object[width];
        for (int i = 0; i < width; i++) {
          values[i] = message.get(i);
        }
        int base = passed.length;
        String[] kept =
            values[base + 2] == null
                ? null
                : new String[] {(String) values[base], (String) values[base + 1], (String) values[base + 2]};
        memory.hold(
            values,
            message.isNullAt(outId) ? "" : message.getString(outId),
            message.getLong(outPosition),
            held.getLong(1),
            entryOf(message.get(outOrigin), message.get(outService)),
            kept);
      }
      memory.settle(); // as the state holds it
      return memory;
    }

    /**
     * Keep the memory, with its one timer at {@code at}; {@code timer} is the key's timer still
     * registered, if any. A memory left empty is removed with its timer ({@code existed}: the key
     * had a memory).
     */
    private void save(ConversationMemory<Object[]> memory, boolean existed, long at, long timer) {
      if (existed && !memory.changed() && timer == at) {
        return; // the state holds this memory and its timer already
      }
      if (memory.isEmpty()) {
        if (timer != NO_TIMER) {
          getHandle().deleteTimer(timer);
        }
        if (existed) {
          state.clear();
        }
        return;
      }
      if (timer != at) {
        if (timer != NO_TIMER) {
          getHandle().deleteTimer(timer);
        }
        getHandle().registerTimer(at);
      }
      List<Row> entries = new ArrayList<>();
      for (Map.Entry<String, ConversationMemory.Kept> e : memory.kept().entrySet()) {
        String[] parts = e.getKey().split("\u0000", -1);
        String[] id = e.getValue().identity;
        entries.add(RowFactory.create(parts[0], parts[1], id[0], id[1], id[2], e.getValue().chosenAt));
      }
      List<Row> held = new ArrayList<>();
      for (ConversationMemory.Held<Object[]> h : memory.held()) {
        Object[] values = h.message.clone();
        int base = passed.length;
        for (int i = 0; i < KEPT.length; i++) {
          values[base + i] = h.kept == null ? null : h.kept[i];
        }
        held.add(RowFactory.create(RowFactory.create(values), h.delayedAt));
      }
      // A Row's array field is a Scala Seq.
      state.update(
          RowFactory.create(
              CollectionConverters.asScala(entries), CollectionConverters.asScala(held), at));
    }

    private String[] identityOf(Row row) {
      if (row.isNullAt(identity[2])) {
        return null;
      }
      return new String[] {
        row.isNullAt(identity[0]) ? "" : row.getString(identity[0]),
        row.isNullAt(identity[1]) ? "" : row.getString(identity[1]),
        row.getString(identity[2])
      };
    }

    /** The output values of an input row: its own columns, then nulls for the memory's. */
    private Object[] emitted(Row row) {
      Object[] values = new Object[width];
      for (int i = 0; i < passed.length; i++) {
        values[i] = row.get(passed[i]);
      }
      return values;
    }

    private static String entryOf(Object origin, Object service) {
      return ConversationMemory.entry(
          origin == null ? null : origin.toString(), service == null ? null : service.toString());
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
