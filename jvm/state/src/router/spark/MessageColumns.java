package router.spark;

import java.io.Serializable;

import org.apache.spark.sql.types.StructType;

/**
 * Where the columns the rules read of a message ({@code streaming.spark.sources.decode}'s) are in a
 * row's schema; {@link #error} is -1 when the rows have no {@code error} column. A missing column
 * of the others fails with Spark's {@link IllegalArgumentException}.
 *
 * <p>F3's lifetime is read one of two ways: {@code ttl_s}, the seconds a message has left, from a
 * caller that knows them ({@code streaming.spark.decider}); or, without that column, {@code
 * expires_ms} and {@code ttl_ms} as the message came, read at the batch's time ({@link
 * router.rules.Message#remainingS}). The index of the way not taken is -1.
 */
class MessageColumns implements Serializable {
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
  final int ttlS;
  final int expiresMs;
  final int ttlMs;

  MessageColumns(StructType s) {
    error = optional(s, "error");
    instance = s.fieldIndex("instance");
    conversation = s.fieldIndex("conversation_id");
    service = s.fieldIndex("service");
    origin = s.fieldIndex("origin");
    broker = s.fieldIndex("bid");
    fromTarget = s.fieldIndex("from_target");
    hops = s.fieldIndex("hops_remaining");
    size = s.fieldIndex("size_bytes");
    ttlS = optional(s, "ttl_s");
    expiresMs = ttlS >= 0 ? -1 : s.fieldIndex("expires_ms");
    ttlMs = ttlS >= 0 ? -1 : s.fieldIndex("ttl_ms");
  }

  /** The index of {@code name} in {@code s}, or -1 when it has no such column. */
  static int optional(StructType s, String name) {
    scala.Option<Object> index = s.getFieldIndex(name);
    return index.isDefined() ? (Integer) index.get() : -1;
  }
}
