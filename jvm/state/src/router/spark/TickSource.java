package router.spark;

import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.function.LongSupplier;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The streaming query's tick: a source whose only use is to have new data now and then, so that a
 * micro-batch runs although no message arrives, and the state processor's timers fire (D2: delayed
 * messages fall due). Its rows are dropped at once ({@code streaming.spark.sources}).
 *
 * <p>It ticks once per {@linkplain #pace pace}, one second unless the driver sets another for the
 * query (by the {@code name} option). A micro-batch runs only when a source has new data, so an
 * idle router whose pace is long runs few batches: measured on 2 cores, an idle {@code router run}
 * used 42-44 s of JVM CPU a minute with a tick every second, and 2.5 s with no tick at all.
 *
 * <p>Its pace counts from the last micro-batch the query ran, whichever source's data started it:
 * the driver says when one {@linkplain #ran ran}, so a busy query, whose messages start a batch
 * every half second, gets no batch of the tick's own in between. A batch that delayed messages
 * also says {@linkplain #ranDelaying when they fall due}, and the tick comes then: a retry is not put
 * off by the batches that ran after the one that delayed it. A query that resumed a checkpoint is
 * told when the timers of the state it resumed {@linkplain #fallDue fall due}, and the tick comes then too.
 *
 * <p>An offset is the epoch millisecond of the tick, as a plain JSON number: the same form as
 * Spark's rate source, which gave the tick before, so a checkpoint it wrote resumes with this one
 * (its offsets, seconds since its start, are smaller than any of these).
 */
public final class TickSource implements TableProvider {
  /** The one-second pace Spark's rate source had at one row a second. */
  public static final long DEFAULT_PACE_MS = 1000L;

  /** The rows' schema, as the rate source's: built when asked, so the pace needs no Spark classes. */
  static StructType schema() {
    return new StructType()
        .add("timestamp", DataTypes.TimestampType, false)
        .add("value", DataTypes.LongType, false);
  }

  private static final Map<String, Long> PACES = new ConcurrentHashMap<>();

  /** Tick every {@code ms} in the query whose source is named {@code name}; from its next offset on. */
  public static void pace(String name, long ms) {
    if (ms <= 0) {
      throw new IllegalArgumentException("a tick's pace must be positive, got " + ms + " ms");
    }
    PACES.put(name, ms);
  }

  /** The pace of the source named {@code name}: the last one set, else one second. */
  public static long paceOf(String name) {
    return PACES.getOrDefault(name, DEFAULT_PACE_MS);
  }

  /** The queries a batch of which ran since their tick last asked. */
  private static final Set<String> RAN = ConcurrentHashMap.newKeySet();

  /** A micro-batch of the query named {@code name} ran: its tick's pace counts from that batch's round. */
  public static void ran(String name) {
    RAN.add(name);
  }

  /**
   * A micro-batch of {@code name} ran and delayed messages, which fall due at {@code dueAtMs} (epoch
   * milliseconds: the batch's time, its messages' {@code decided_at}, and the retry time; D2): besides
   * counting its pace from that batch, the tick comes at the first round from then on (less the state
   * processor's {@link ConversationState#DUE_MARGIN_MS}), so that a batch runs when they fall due,
   * whatever batches ran in between. The due time counts from the batch's own time, not from its
   * round: a batch that starts late delays its messages as much later.
   */
  public static void ranDelaying(String name, long dueAtMs) {
    if (dueAtMs < 0) {
      throw new IllegalArgumentException("a due time must not be negative, got " + dueAtMs + " ms");
    }
    fallDue(name, List.of(dueAtMs - ConversationState.DUE_MARGIN_MS));
    ran(name); // after its due time: the round that takes the news of the batch takes that too
  }

  /** Per query: the instants, by the wall clock, at which timers of its state fall due. */
  private static final Map<String, Set<Long>> DUE = new ConcurrentHashMap<>();

  /**
   * Timers of the query named {@code name} fall due at {@code wallMs} (epoch milliseconds; the
   * processor's, already less its margin): the tick comes at the first round from each. A batch
   * that delays messages gives theirs ({@link #ranDelaying}); the driver gives those of the state a
   * query resumed, read from the state store (D2: held messages fall due on time after a restart
   * too, not a pace later).
   */
  public static void fallDue(String name, List<? extends Number> wallMs) {
    Set<Long> due = DUE.computeIfAbsent(name, n -> new ConcurrentSkipListSet<>());
    for (Number at : wallMs) {
      due.add(at.longValue());
    }
  }

  /** The due instants of {@code name} given since this was last asked (taken once). */
  static Set<Long> tookDue(String name) {
    Set<Long> due = DUE.remove(name);
    return due == null ? Set.of() : due;
  }

  /** Whether a batch of {@code name} ran since this was last asked (the news is taken once). */
  static boolean tookRan(String name) {
    return RAN.remove(name);
  }

  /** Forget the pace set for {@code name}, and its last batch: a later query by that name starts afresh. */
  public static void forget(String name) {
    PACES.remove(name);
    RAN.remove(name);
    DUE.remove(name);
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return TickSource.schema();
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    String name = properties.getOrDefault("name", "");
    return new TickTable(name);
  }

  /** Whether a new tick is due, {@code elapsedNanos} after the last one (none yet: negative). */
  static boolean due(long elapsedNanos, long paceMs) {
    return elapsedNanos < 0 || elapsedNanos >= paceMs * 1_000_000L;
  }

  /** A new tick's offset: the wall clock's millisecond, or one more than the last if that is later. */
  static long next(long previous, long nowMs) {
    return Math.max(previous + 1, nowMs);
  }

  private static final class TickTable implements Table, SupportsRead {
    private final String name;

    TickTable(String name) {
      this.name = name;
    }

    @Override
    public String name() {
      return "router tick " + name;
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return TickSource.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () ->
          new Scan() {
            @Override
            public StructType readSchema() {
              return TickSource.schema();
            }

            @Override
            public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
              return new Stream(name, System::nanoTime, System::currentTimeMillis);
            }
          };
    }
  }

  static final class TickOffset extends Offset {
    final long ms;

    TickOffset(long ms) {
      this.ms = ms;
    }

    @Override
    public String json() {
      return Long.toString(ms);
    }
  }

  static final class Stream implements MicroBatchStream {
    private final String name;
    private final LongSupplier nanos;
    private final LongSupplier wallMs;
    private long last;
    /**
     * When the last tick came, or the round of the last batch that ran, by the monotonic clock (its
     * pace is not upset by the wall clock's steps).
     */
    private long lastAtNanos;
    private boolean ticked;
    /** When the query last asked for the latest offset: the round whose batch, if one ran, planned it. */
    private long roundAtNanos;
    /** When delayed messages fall due, by the wall clock: the tick comes at the first round from each. */
    private final TreeSet<Long> dueAtMs = new TreeSet<>();

    Stream(String name, LongSupplier nanos, LongSupplier wallMs) {
      this.name = name;
      this.nanos = nanos;
      this.wallMs = wallMs;
    }

    @Override
    public synchronized Offset latestOffset() {
      long now = nanos.getAsLong();
      long wall = wallMs.getAsLong();
      // A batch ran since the last round: the round that planned it counts as a tick.
      if (tookRan(name) && ticked) {
        lastAtNanos = Math.max(lastAtNanos, roundAtNanos);
      }
      dueAtMs.addAll(tookDue(name));
      roundAtNanos = now;
      boolean fallsDue = !dueAtMs.isEmpty() && dueAtMs.first() <= wall;
      if (fallsDue || due(ticked ? now - lastAtNanos : -1L, paceOf(name))) {
        dueAtMs.headSet(wall, true).clear();
        last = next(last, wall);
        lastAtNanos = now;
        ticked = true;
      }
      return new TickOffset(last);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      long to = ((TickOffset) end).ms;
      long from = start == null ? 0L : ((TickOffset) start).ms;
      return to > from ? new InputPartition[] {new Tick(to)} : new InputPartition[0];
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return partition -> new TickReader(((Tick) partition).ms);
    }

    @Override
    public Offset initialOffset() {
      return new TickOffset(0L);
    }

    @Override
    public Offset deserializeOffset(String json) {
      return new TickOffset(Long.parseLong(json.trim()));
    }

    @Override
    public void commit(Offset end) {}

    @Override
    public void stop() {}
  }

  private static final class Tick implements InputPartition {
    private static final long serialVersionUID = 1L;
    final long ms;

    Tick(long ms) {
      this.ms = ms;
    }
  }

  private static final class TickReader implements PartitionReader<InternalRow> {
    private final long ms;
    private boolean read;

    TickReader(long ms) {
      this.ms = ms;
    }

    @Override
    public boolean next() {
      if (read) {
        return false;
      }
      read = true;
      return true;
    }

    @Override
    public InternalRow get() {
      return new GenericInternalRow(new Object[] {ms * 1000L, ms});
    }

    @Override
    public void close() {}
  }
}
