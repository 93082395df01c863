package router.plan;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * A query built once over a stand-in table and run many times over other tables of its shape.
 *
 * <p>Building a wide DataFrame from Python costs a py4j round trip and an analysis per step; the
 * router's decision has dozens of steps and runs every micro-batch on a new table (the batch).
 * A template is built once per route snapshot over a {@link #slot} (an empty local table with the
 * batch's schema); {@link #bind} puts a batch where the slot was, at the level of Spark's analyzed
 * logical plan, by projecting the batch's columns onto the slot's attributes. Spark then
 * optimizes and plans the bound query as it would any other.
 */
public final class Template {
  private final SparkSession spark;
  private final LogicalPlan plan;
  private final Seq<Attribute> slot;

  /** A template of {@code built}, a query over {@code slot} (made by {@link #slot}). */
  public Template(Dataset<Row> built, Dataset<Row> slot) {
    this.spark = (SparkSession) built.sparkSession();
    this.plan = built.queryExecution().analyzed();
    this.slot = slot.queryExecution().analyzed().output();
  }

  /** An empty table of {@code schema} (JSON) to build a template over. */
  public static Dataset<Row> slot(org.apache.spark.sql.SparkSession spark, String schema) {
    StructType type = (StructType) StructType.fromJson(schema);
    List<Attribute> attributes = new ArrayList<>();
    for (Attribute a : CollectionConverters.asJava(org.apache.spark.sql.catalyst.types.DataTypeUtils.toAttributes(type))) {
      attributes.add(a);
    }
    LocalRelation relation =
        new LocalRelation(CollectionConverters.asScala(attributes).toSeq(), emptySeq(), false, Option.empty());
    return org.apache.spark.sql.classic.Dataset.ofRows((SparkSession) spark, relation);
  }

  /** The template's query over {@code input}, whose columns are the slot's (by name, any order). */
  public Dataset<Row> bind(Dataset<Row> input) {
    LogicalPlan source = input.queryExecution().analyzed();
    List<Attribute> given = CollectionConverters.asJava(source.output());
    List<NamedExpression> projected = new ArrayList<>();
    for (Attribute wanted : CollectionConverters.asJava(slot)) {
      Attribute found = null;
      for (Attribute a : given) {
        if (a.name().equals(wanted.name())) {
          found = a;
          break;
        }
      }
      if (found == null) {
        throw new IllegalArgumentException(
            "the table bound to a template has no column " + wanted.name() + ": it has " + source.schema().simpleString());
      }
      projected.add(
          new Alias(
              found,
              wanted.name(),
              wanted.exprId(),
              emptySeq(),
              Option.empty(),
              emptySeq()));
    }
    LogicalPlan replacement = new Project(CollectionConverters.asScala(projected).toSeq(), source);
    LogicalPlan bound =
        plan.transformUp(
            new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
              @Override
              public boolean isDefinedAt(LogicalPlan node) {
                return node instanceof LocalRelation && node.output().equals(slot);
              }

              @Override
              public LogicalPlan apply(LogicalPlan node) {
                return replacement;
              }
            });
    return org.apache.spark.sql.classic.Dataset.ofRows(spark, bound);
  }

  @SuppressWarnings("unchecked")
  private static <T> Seq<T> emptySeq() {
    return (Seq<T>) scala.collection.immutable.Nil$.MODULE$;
  }
}
