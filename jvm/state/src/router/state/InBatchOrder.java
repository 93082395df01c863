package router.state;

import java.io.Serializable;
import java.util.HashSet;
import java.util.Iterator;
import java.util.Objects;
import java.util.Set;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * D1 within one micro-batch: once a locally originated message of a conversation endpoint (the
 * conversation and the side that sends: initiator or target) is delayed, the endpoint's later
 * messages in the batch wait behind it. The other side of the conversation does not wait.
 *
 * <p>The state processor ({@link RouterState}) lets each endpoint's messages leave together, in
 * batch order; the decision adds columns with broadcast lookups and projections, which keep the
 * rows of a partition in their order. So each endpoint's decided rows arrive here one after
 * another, and one pass over each partition finds the rows behind a delayed one, with no shuffle
 * and no sort. The pass checks that promise: an endpoint met again after another one began fails
 * the batch (the checkpoint repeats it) rather than letting a message overtake.
 *
 * <p>Adds the boolean column {@code _behind}; what a message behind looks like is the SQL's
 * ({@code streaming.spark.engine.apply_behind}), as for the window the engine uses when the
 * batch's rows are not in this order.
 */
public final class InBatchOrder {
  public static final String BEHIND = "_behind";

  private InBatchOrder() {}

  /** {@code decided} with {@code _behind} set per row (see the class comment). */
  public static Dataset<Row> behind(Dataset<Row> decided) {
    SparkSession spark = (SparkSession) decided.sparkSession();
    StructType input = decided.schema();
    StructType output = input.add(BEHIND, DataTypes.BooleanType, false);
    int instance = input.fieldIndex("instance");
    int conversation = input.fieldIndex("conversation_id");
    int fromTarget = input.fieldIndex("from_target");
    int origin = input.fieldIndex("origin");
    int outcome = input.fieldIndex("outcome");
    RDD<InternalRow> rows = decided.queryExecution().toRdd();
    RDD<InternalRow> marked =
        rows.mapPartitions(
            new Mark(output, instance, conversation, fromTarget, origin, outcome),
            true,
            ClassTag$.MODULE$.apply(InternalRow.class));
    return spark.internalCreateDataFrame(marked, output, false);
  }

  /** What each partition runs (serializable, as Spark ships it to the executors). */
  static final class Mark
      extends AbstractFunction1<scala.collection.Iterator<InternalRow>, scala.collection.Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final StructType output;
    private final int instance;
    private final int conversation;
    private final int fromTarget;
    private final int origin;
    private final int outcome;

    Mark(StructType output, int instance, int conversation, int fromTarget, int origin, int outcome) {
      this.output = output;
      this.instance = instance;
      this.conversation = conversation;
      this.fromTarget = fromTarget;
      this.origin = origin;
      this.outcome = outcome;
    }

    @Override
    public scala.collection.Iterator<InternalRow> apply(scala.collection.Iterator<InternalRow> rows) {
      Scan scan =
          new Scan(CollectionConverters.asJava(rows), output, instance, conversation, fromTarget, origin, outcome);
      return CollectionConverters.asScala(scan);
    }
  }

  /** One partition's pass. */
  static final class Scan implements Iterator<InternalRow> {
    private static final UTF8String REMOTE = UTF8String.fromString("remote");
    private static final UTF8String DELAYED = UTF8String.fromString("delayed");

    private final Iterator<InternalRow> rows;
    private final UnsafeProjection project;
    private final int instance;
    private final int conversation;
    private final int fromTarget;
    private final int origin;
    private final int outcome;
    private final JoinedRow joined = new JoinedRow();
    private final GenericInternalRow flag = new GenericInternalRow(1);
    private final Set<String> finished = new HashSet<>();
    private String current;
    private boolean delayedSeen;

    Scan(
        Iterator<InternalRow> rows,
        StructType output,
        int instance,
        int conversation,
        int fromTarget,
        int origin,
        int outcome) {
      this.rows = rows;
      this.project = UnsafeProjection.create(output);
      this.instance = instance;
      this.conversation = conversation;
      this.fromTarget = fromTarget;
      this.origin = origin;
      this.outcome = outcome;
    }

    @Override
    public boolean hasNext() {
      return rows.hasNext();
    }

    @Override
    public InternalRow next() {
      InternalRow row = rows.next();
      if (row.isNullAt(instance) || row.isNullAt(conversation)) {
        // A record that did not decode belongs to no conversation (it is dead-lettered).
        flag.setBoolean(0, false);
        return project.apply(joined.apply(row, flag));
      }
      boolean target = !row.isNullAt(fromTarget) && row.getBoolean(fromTarget);
      String key =
          row.getUTF8String(instance) + "\u0000" + row.getUTF8String(conversation) + (target ? "\u0000t" : "\u0000i");
      if (!Objects.equals(key, current)) {
        if (current != null) {
          finished.add(current);
        }
        if (!finished.isEmpty() && finished.contains(key)) {
          throw new IllegalStateException(
              "the decided rows of conversation " + row.getUTF8String(conversation) + " ("
                  + (target ? "target" : "initiator") + " side) are not together in batch order; "
                  + "the batch is not written (it is repeated)");
        }
        current = key;
        delayedSeen = false;
      }
      boolean local = !REMOTE.equals(row.getUTF8String(origin));
      flag.setBoolean(0, local && delayedSeen);
      if (local && DELAYED.equals(row.getUTF8String(outcome))) {
        delayedSeen = true;
      }
      return project.apply(joined.apply(row, flag));
    }
  }
}
