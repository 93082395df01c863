package router.plan;

import org.apache.spark.Dependency;
import org.apache.spark.OneToOneDependency;
import org.apache.spark.Partition;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * The leaf of a {@link Prepared} query: it reads whichever micro-batch it was last given.
 *
 * <p>The query above it is planned, generated and compiled once, and its RDDs are kept; each
 * micro-batch is put in as this RDD's one parent ({@link #take}), so Spark's scheduler finds the
 * batch's own stages (the state processor's shuffle) through it, and each task reads its
 * partition of the batch. The number of partitions is fixed when the query first runs.
 */
final class BatchInput extends RDD<InternalRow> {
  private static final long serialVersionUID = 1L;
  private static final ClassTag<InternalRow> ROW = ClassTag$.MODULE$.apply(InternalRow.class);

  private RDD<InternalRow> batch;
  /**
   * The batch's partitions, as the driver planned them. An RDD keeps its partitions in a transient
   * field, and a source's RDD cannot plan them again in a task (its input partitions are transient
   * too): a batch read straight from a source, with no shuffle under it, is read through these.
   */
  private Partition[] parents = new Partition[0];
  private final int partitions;

  BatchInput(SparkContext sc, int partitions) {
    super(sc, emptySeq(), ROW);
    this.partitions = partitions;
  }

  /** From now on read {@code next}, which must have this input's number of partitions. */
  void take(RDD<InternalRow> next) {
    if (next.getNumPartitions() != partitions) {
      throw new IllegalArgumentException(
          "a micro-batch of " + next.getNumPartitions() + " partitions given to a plan made for " + partitions);
    }
    batch = next;
    parents = next.partitions();
    clearDependencies();
  }

  @Override
  public Partition[] getPartitions() {
    Partition[] out = new Partition[partitions];
    for (int i = 0; i < partitions; i++) {
      out[i] = new Slot(i);
    }
    return out;
  }

  @Override
  public Seq<Dependency<?>> getDependencies() {
    if (batch == null) {
      return emptySeq();
    }
    Dependency<?> parent = new OneToOneDependency<>(batch);
    return scala.jdk.javaapi.CollectionConverters.asScala(java.util.List.<Dependency<?>>of(parent)).toList();
  }

  @Override
  public Iterator<InternalRow> compute(Partition split, TaskContext context) {
    if (batch == null) {
      throw new IllegalStateException("a prepared query ran before it was given a micro-batch");
    }
    return batch.iterator(parents[split.index()], context);
  }

  @Override
  public Seq<String> getPreferredLocations(Partition split) {
    return batch == null ? emptySeq() : batch.preferredLocations(parents[split.index()]);
  }

  @SuppressWarnings("unchecked")
  private static <T> Seq<T> emptySeq() {
    return (Seq<T>) scala.collection.immutable.Nil$.MODULE$;
  }

  private static final class Slot implements Partition {
    private static final long serialVersionUID = 1L;
    private final int index;

    Slot(int index) {
      this.index = index;
    }

    @Override
    public int index() {
      return index;
    }

    @Override
    public int hashCode() {
      return index;
    }

    @Override
    public boolean equals(Object other) {
      return other instanceof Slot && ((Slot) other).index == index;
    }
  }
}
