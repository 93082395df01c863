package router.spark;

import java.io.Serializable;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import router.contract.Contract;
import router.rules.Decision;
import router.rules.ForwardBuffers;
import router.rules.Message;
import router.rules.PassMemory;
import router.rules.Route;
import router.rules.Snapshot;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * A batch's messages decided in the JVM, one pass per partition, with the batch semantics of
 * {@code streaming.rules.batch} (the reference engine's {@code ReferenceEngine.decide}):
 *
 * <ul>
 *   <li>D1, B7: a locally originated message whose conversation endpoint has a message waiting
 *       (the state processor's {@code waiting}, or one delayed earlier in the pass) is delayed
 *       behind it;
 *   <li>B4: the first message to reach M4 for (instance, scope, service) asks; later ones find the
 *       request pending;
 *   <li>K2: a message that keeps its choice is given what its conversation chose earlier in the
 *       pass, else what the row carries ({@code kept_*}, from the state processor);
 *   <li>F5: what a batch forwards is in flight together until its write is done; a message whose
 *       forwarding would push the pass's bytes over the instance's share of MESSAGE_FORWARD_SIZE is
 *       discarded ({@code forward_buffer_full}). The partitions of a batch are written side by
 *       side, so each pass has an equal share of the budget (the whole of it in one partition;
 *       {@link ForwardBuffers});
 *   <li>C5, M3: a pick among equal options takes the next in turn, the counters running on from
 *       those the driver set; the pass hands back what it advanced.
 * </ul>
 *
 * <p>The rules are {@code router.rules}' ({@link PassMemory} carries D1, B4, K2, C5 and M3 from one
 * message to the next); this class only moves rows in and out of them.
 *
 * <p>Each endpoint's rows must come in batch order within their partition (the state processor
 * lets them leave so); B4 across endpoints, and the rotation of C5 and M3 across conversations, need
 * the whole batch in one partition in batch order, which the caller arranges while a route to the
 * dynamic routing service, or a set of equal options ({@link Snapshot#spreads}), exists. A row whose
 * {@code error} is set (it did not decode) is not decided: its decision columns are null.
 *
 * <p>Adds {@link #COLUMNS}: the decision ({@code outcome}, {@code d_database}, {@code d_address},
 * {@code d_route}, {@code match_step}, {@code choice_step}, {@code reason}, {@code requests},
 * {@code d_hops_remaining}, {@code d_scope}) and K2's ({@code k_bid}, {@code k_route_service},
 * {@code k_address}: the identity to keep; {@code k_change}: {@code first} when the conversation
 * kept none, {@code again} when it kept another); and {@code d_topic}, the topic the message goes
 * to, when the snapshot names topics ({@link Snapshot#topic}); {@code d_snapshot}, the version of the route snapshot it was decided with; and
 * {@code d_decided_at}, on every row (a dead letter's too), the row's {@code batch_ms} as ISO-8601
 * UTC text ({@link #TIME_TEXT}; null without that column), made once per batch time, not per row;
 * and {@code d_headers}, when the snapshot names topics, the Kafka headers the decided message
 * leaves with ({@link Headers}; null on a row that is not decided).
 */
public final class DecisionPass {
  static final String[] COLUMNS = Contract.DECISION_COLUMNS;
  private static final int DECIDED_AT = column("d_decided_at");
  private static final int HEADERS = column("d_headers");
  /** A Kafka record's headers, as the Kafka sink takes them: {@code streaming.spark.output.HEADER_TYPE}. */
  static final DataType HEADER_TYPE =
      DataTypes.createArrayType(
          new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType), true);
  /** How {@code d_decided_at} is written: {@code streaming.spark.sources.TIME_FORMAT}. */
  static final DateTimeFormatter TIME_TEXT =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").withZone(ZoneOffset.UTC);
  private static final int HOPS = column("d_hops_remaining");

  private DecisionPass() {}

  /** {@code snapshot} broadcast to the tasks, once per route snapshot. */
  public static Broadcast<Snapshot> broadcast(org.apache.spark.sql.SparkSession spark, Snapshot snapshot) {
    return JavaSparkContext.fromSparkContext(spark.sparkContext()).broadcast(snapshot);
  }

  /** New inputs for a plan, to be {@link DecisionInputs#set set} before each batch. */
  public static DecisionInputs inputs(org.apache.spark.sql.SparkSession spark) {
    return new DecisionInputs(spark.sparkContext());
  }

  /** The place of a decision column in {@link #COLUMNS}; a name the contract lacks fails the class. */
  private static int column(String name) {
    int at = Arrays.asList(COLUMNS).indexOf(name);
    if (at < 0) {
      throw new IllegalStateException("the contract's decision columns have no " + name);
    }
    return at;
  }

  /** The output schema: the input's columns, then {@link #COLUMNS}. */
  public static StructType outputSchema(StructType input) {
    StructType out = input;
    for (int i = 0; i < COLUMNS.length; i++) {
      DataType type =
          i == HOPS ? DataTypes.IntegerType : i == HEADERS ? HEADER_TYPE : DataTypes.StringType;
      out = out.add(COLUMNS[i], type, true);
    }
    return out;
  }

  /** Decide {@code rows} with what {@code inputs} holds when a batch runs (the snapshot, B4's requests). */
  public static Dataset<Row> apply(Dataset<Row> rows, DecisionInputs inputs) {
    SparkSession spark = (SparkSession) rows.sparkSession();
    StructType input = rows.schema();
    StructType output = outputSchema(input);
    RDD<InternalRow> decided =
        rows.queryExecution()
            .toRdd()
            .mapPartitions(
                new PartitionFunction(input, inputs, rows.queryExecution().toRdd().getNumPartitions()),
                true,
                ClassTag$.MODULE$.apply(InternalRow.class));
    return spark.internalCreateDataFrame(decided, output, false);
  }

  /** Where the columns the rules read are in the input. */
  static final class Columns extends MessageColumns {
    private static final long serialVersionUID = 1L;
    final int keptBroker;
    final int keptService;
    final int keptAddress;
    final int waiting;
    final int batchMs;

    Columns(StructType s) {
      super(s);
      keptBroker = optional(s, "kept_bid");
      keptService = optional(s, "kept_route_service");
      keptAddress = optional(s, "kept_address");
      waiting = optional(s, "waiting");
      batchMs = optional(s, "batch_ms");
      if (ttlS < 0 && batchMs < 0) {
        throw new IllegalArgumentException("the rows carry no ttl_s, and no batch_ms to read expires_ms and ttl_ms at");
      }
    }
  }

  /** What each partition runs (serializable: Spark ships it to the executors). */
  static final class PartitionFunction
      extends AbstractFunction1<scala.collection.Iterator<InternalRow>, scala.collection.Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final Columns columns;
    private final DecisionInputs inputs;
    private final int partitions;

    PartitionFunction(StructType input, DecisionInputs inputs, int partitions) {
      this.columns = new Columns(input);
      this.inputs = inputs;
      this.partitions = Math.max(1, partitions);
    }

    @Override
    public scala.collection.Iterator<InternalRow> apply(scala.collection.Iterator<InternalRow> rows) {
      Scan scan = new Scan(CollectionConverters.asJava(rows), columns, inputs, partitions);
      return CollectionConverters.asScala(scan);
    }
  }

  /** An instant as {@link #TIME_TEXT}, made again only when the instant changes. */
  static final class InstantText {
    private long ms = Long.MIN_VALUE;
    private UTF8String text;

    UTF8String of(long at) {
      if (at != ms) {
        ms = at;
        text = UTF8String.fromString(TIME_TEXT.format(Instant.ofEpochMilli(at)));
      }
      return text;
    }
  }

  /** One partition's pass: the rows in, each with its decision. */
  static final class Scan implements Iterator<InternalRow> {
    private static final UTF8String FIRST = UTF8String.fromString("first");
    private static final UTF8String AGAIN = UTF8String.fromString("again");

    private final Iterator<InternalRow> rows;
    private final Columns c;
    private final Snapshot snapshot;
    private final JoinedRow joined = new JoinedRow();
    private final GenericInternalRow decision = new GenericInternalRow(COLUMNS.length);
    /** D1, B4, K2, C5 and M3 from one message to the next. */
    private final PassMemory pass;
    /** Destination topics named in this pass, by instance, database and service or by address. */
    private final Map<String, UTF8String> topics = new HashMap<>();
    private final UTF8String version;
    /** F5: bytes forwarded in this pass, by instance. */
    private final ForwardBuffers forwarded;
    private final DecisionInputs inputs;
    private boolean reported;
    /** The batch's time as text: every row of a batch has the same. */
    private final InstantText decidedAt = new InstantText();
    /** A delayed message's due time (D2) as text: a batch's delayed messages share one. */
    private final InstantText dueAt = new InstantText();

    Scan(Iterator<InternalRow> rows, Columns columns, DecisionInputs inputs, int partitions) {
      this.rows = rows;
      this.c = columns;
      this.inputs = inputs;
      this.snapshot = inputs.snapshot();
      this.version = utf8(snapshot.version());
      this.pass = new PassMemory(inputs.pending(), inputs.rotation());
      this.forwarded = new ForwardBuffers(partitions);
    }

    @Override
    public boolean hasNext() {
      boolean more = rows.hasNext();
      if (!more && !reported) {
        reported = true;
        inputs.report(pass.advanced());
      }
      return more;
    }

    @Override
    public InternalRow next() {
      InternalRow row = rows.next();
      for (int i = 0; i < COLUMNS.length; i++) {
        decision.setNullAt(i);
      }
      if (c.batchMs >= 0 && !row.isNullAt(c.batchMs)) {
        decision.update(DECIDED_AT, decidedAt.of(row.getLong(c.batchMs)));
      }
      Snapshot.Site site = (c.error >= 0 && !row.isNullAt(c.error)) ? null : snapshot.site(string(row, c.instance));
      if (site != null) {
        decide(row, site);
      }
      // Not copied into an UnsafeRow here: the scan of the DataFrame over this pass (`apply`) reads
      // the fields it needs, and copies the row when a step needs one, before the next row comes.
      return joined.apply(row, decision);
    }

    /** F3: the seconds the message in {@code row} has left to live ({@link MessageColumns}). */
    private Double ttlS(InternalRow row) {
      if (c.ttlS >= 0) {
        return row.isNullAt(c.ttlS) ? null : row.getDouble(c.ttlS);
      }
      return Message.remainingS(
          row.isNullAt(c.expiresMs) ? null : row.getLong(c.expiresMs),
          row.isNullAt(c.ttlMs) ? null : row.getLong(c.ttlMs),
          row.getLong(c.batchMs));
    }

    private void decide(InternalRow row, Snapshot.Site site) {
      String service = string(row, c.service);
      Message m =
          new Message(
              string(row, c.conversation),
              service,
              string(row, c.origin),
              string(row, c.broker),
              !row.isNullAt(c.fromTarget) && row.getBoolean(c.fromTarget),
              row.getInt(c.hops),
              ttlS(row),
              row.getLong(c.size));
      boolean waits = c.waiting >= 0 && !row.isNullAt(c.waiting) && row.getBoolean(c.waiting);
      Decision d = pass.decide(site, m, waits, kept(row));
      Route.Identity remembered = pass.before();
      forwarded.take(site, m, d);
      UTF8String outcome = utf8(d.outcome());
      UTF8String route = utf8(d.route());
      UTF8String matchStep = utf8(d.matchStep());
      UTF8String choiceStep = utf8(d.choiceStep());
      UTF8String reason = utf8(d.reason());
      UTF8String database = utf8(d.database());
      UTF8String address = utf8(d.address());
      UTF8String requests = utf8(d.requests());
      UTF8String scope = utf8(d.scope());
      decision.update(0, outcome);
      decision.update(1, database);
      decision.update(2, address);
      decision.update(3, route);
      decision.update(4, matchStep);
      decision.update(5, choiceStep);
      decision.update(6, reason);
      decision.update(7, requests);
      if (d.hopsRemaining() != null) {
        decision.setInt(HOPS, d.hopsRemaining());
      }
      decision.update(9, scope);
      Route.Identity keeps = d.remembered();
      if (keeps != null) {
        decision.update(10, utf8(keeps.brokerInstance));
        decision.update(11, utf8(keeps.service));
        decision.update(12, utf8(keeps.address));
        if (remembered == null) {
          decision.update(13, FIRST);
        } else if (!remembered.equals(keeps)) {
          decision.update(13, AGAIN);
        }
      }
      decision.update(15, version);
      if (!snapshot.namesTopics()) {
        return;
      }
      decision.update(14, topic(d, site, service));
      Headers h = new Headers();
      h.add(Headers.OUTCOME, outcome);
      h.add(Headers.ROUTE, route);
      h.add(Headers.MATCH_STEP, matchStep);
      h.add(Headers.CHOICE_STEP, choiceStep);
      h.add(Headers.REASON, reason);
      h.add(Headers.DATABASE, database);
      h.add(Headers.ADDRESS, address);
      h.add(Headers.SCOPE, scope);
      h.add(Headers.REQUESTS, requests);
      h.add(Headers.SNAPSHOT_VERSION, version);
      h.add(Headers.DECIDED_AT, (UTF8String) decision.get(DECIDED_AT, DataTypes.StringType));
      h.add(Headers.ROUTER_INSTANCE, row.getUTF8String(c.instance));
      if (Decision.DELAYED.equals(d.outcome())) {
        // D2: when it falls due; K2: the conversation's kept choice travels with it (read back).
        if (c.batchMs >= 0 && !row.isNullAt(c.batchMs)) {
          h.add(Headers.DUE_AT, dueAt.of(row.getLong(c.batchMs) + site.retryMs()));
        }
        h.add(Headers.KEPT_BID, utf8At(row, c.keptBroker));
        h.add(Headers.KEPT_ROUTE_SERVICE, utf8At(row, c.keptService));
        h.add(Headers.KEPT_ADDRESS, utf8At(row, c.keptAddress));
      }
      decision.update(HEADERS, h.array());
    }

    private static UTF8String utf8At(InternalRow row, int index) {
      return index < 0 || row.isNullAt(index) ? null : row.getUTF8String(index);
    }

    /** The topic a decided message goes to ({@link Snapshot#topic}), made into text once per pass. */
    private UTF8String topic(Decision d, Snapshot.Site site, String service) {
      switch (d.outcome()) {
        case Decision.DELIVER:
          return topics.computeIfAbsent(
              "q\u0000" + site.key() + "\u0000" + d.database() + "\u0000" + service,
              k -> utf8(snapshot.topic(d, site, service)));
        case Decision.SEND:
        case Decision.FORWARD:
          return topics.computeIfAbsent("a\u0000" + d.address(), k -> utf8(snapshot.topic(d, site, service)));
        default:
          return utf8(snapshot.topic(d, site, service));
      }
    }

    /** K2: the identity the row's conversation kept in earlier batches, or null. */
    private Route.Identity kept(InternalRow row) {
      if (c.keptAddress < 0 || row.isNullAt(c.keptAddress)) {
        return null;
      }
      return Route.Identity.kept(
          string(row, c.keptBroker), string(row, c.keptService), string(row, c.keptAddress));
    }

    private static String string(InternalRow row, int index) {
      return index < 0 || row.isNullAt(index) ? null : row.getUTF8String(index).toString();
    }

    private static UTF8String utf8(String value) {
      return value == null ? null : UTF8String.fromString(value);
    }
  }
}
