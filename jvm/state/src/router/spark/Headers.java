package router.spark;

import java.util.Arrays;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;
import router.contract.Contract;

/**
 * The Kafka headers a decided message leaves with, as the Kafka sink takes them: an array of
 * (key, value) structs, the value the header's text in UTF-8 ({@link DecisionPass#HEADER_TYPE}). A header
 * whose value is null is left out. Which headers a message carries, and in which order, is written
 * in {@link DecisionPass}; {@code streaming.spark.output} names them for the reader.
 *
 * <p>Built here, in the decision's pass, rather than as a SQL expression over the decision's
 * columns: as SQL, each header was an array of its own, flattened into one per row, and that
 * projection took a quarter of the router's CPU (measured with a flight recording of 300,000
 * messages in micro-batches of 100,000).
 */
final class Headers {
  static final UTF8String OUTCOME = UTF8String.fromString(Contract.HEADER_OUTCOME);
  static final UTF8String ROUTE = UTF8String.fromString(Contract.HEADER_ROUTE);
  static final UTF8String MATCH_STEP = UTF8String.fromString(Contract.HEADER_MATCH_STEP);
  static final UTF8String CHOICE_STEP = UTF8String.fromString(Contract.HEADER_CHOICE_STEP);
  static final UTF8String REASON = UTF8String.fromString(Contract.HEADER_REASON);
  static final UTF8String DATABASE = UTF8String.fromString(Contract.HEADER_DATABASE);
  static final UTF8String ADDRESS = UTF8String.fromString(Contract.HEADER_ADDRESS);
  static final UTF8String SCOPE = UTF8String.fromString(Contract.HEADER_SCOPE);
  static final UTF8String REQUESTS = UTF8String.fromString(Contract.HEADER_REQUESTS);
  static final UTF8String SNAPSHOT_VERSION = UTF8String.fromString(Contract.HEADER_SNAPSHOT_VERSION);
  static final UTF8String DECIDED_AT = UTF8String.fromString(Contract.HEADER_DECIDED_AT);
  static final UTF8String ROUTER_INSTANCE = UTF8String.fromString(Contract.HEADER_ROUTER_INSTANCE);
  static final UTF8String DUE_AT = UTF8String.fromString(Contract.HEADER_DUE_AT);
  static final UTF8String KEPT_BID = UTF8String.fromString(Contract.HEADER_KEPT_BID);
  static final UTF8String KEPT_ROUTE_SERVICE = UTF8String.fromString(Contract.HEADER_KEPT_ROUTE_SERVICE);
  static final UTF8String KEPT_ADDRESS = UTF8String.fromString(Contract.HEADER_KEPT_ADDRESS);

  private Object[] headers = new Object[16];
  private int size;

  /** Add the header {@code key} with {@code value}'s text, unless {@code value} is null. */
  void add(UTF8String key, UTF8String value) {
    if (value == null) {
      return;
    }
    if (size == headers.length) {
      headers = Arrays.copyOf(headers, size * 2);
    }
    InternalRow header = new GenericInternalRow(new Object[] {key, value.getBytes()});
    headers[size++] = header;
  }

  /** The headers added, in order. */
  GenericArrayData array() {
    return new GenericArrayData(Arrays.copyOf(headers, size));
  }
}
