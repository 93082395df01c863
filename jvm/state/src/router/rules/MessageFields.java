package router.rules;

import java.io.Serializable;

import org.apache.spark.sql.types.StructType;

/**
 * Where the columns the rules read of a message ({@code streaming.spark.sources.decode}'s) are in a
 * row's schema; {@link #error} is -1 when the rows have no {@code error} column. A missing column
 * of the others fails with Spark's {@link IllegalArgumentException}.
 */
class MessageFields implements Serializable {
  private static final long serialVersionUID = 1L;
  final int error;
  final int instance;
  final int conversation;
  final int service;
  final int origin;
  final int broker;
  final int fromTarget;
  final int hops;
  final int size;

  MessageFields(StructType s) {
    error = optional(s, "error");
    instance = s.fieldIndex("instance");
    conversation = s.fieldIndex("conversation_id");
    service = s.fieldIndex("service");
    origin = s.fieldIndex("origin");
    broker = s.fieldIndex("bid");
    fromTarget = s.fieldIndex("from_target");
    hops = s.fieldIndex("hops_remaining");
    size = s.fieldIndex("size_bytes");
  }

  /** The index of {@code name} in {@code s}, or -1 when it has no such column. */
  static int optional(StructType s, String name) {
    scala.Option<Object> index = s.getFieldIndex(name);
    return index.isDefined() ? (Integer) index.get() : -1;
  }
}
