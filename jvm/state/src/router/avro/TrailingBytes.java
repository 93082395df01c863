package router.avro;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * How many bytes of a value are left after one Avro record of the schema: 0 for a value that is
 * exactly one record, null for a value that does not decode as one.
 *
 * <p>Spark's {@code from_avro} reads one record from the front of a value and ignores what
 * follows, so a record with junk behind it would pass as the record alone; the router dead-letters
 * it instead ({@code streaming.spark.sources.decode}). Registered as a SQL function for one schema
 * ({@code streaming.spark.sources.register_functions}); each task thread reuses its own reader and
 * decoder.
 *
 * <p>Spark sends the function to each task anew, so each task's copy would parse its own schema. All
 * copies in a JVM share one parsed schema instead ({@link #SCHEMAS}): Avro caches what it derives
 * from a schema per schema object, and a new object per task would be a new entry per task.
 */
public final class TrailingBytes implements UDF1<byte[], Integer> {
  private static final long serialVersionUID = 1L;

  /** The schemas parsed in this JVM, by their JSON text: one object per schema, whatever the task. */
  private static final Map<String, Schema> SCHEMAS = new ConcurrentHashMap<>();

  private final String schemaJson;
  private transient ThreadLocal<State> state;

  public TrailingBytes(String schemaJson) {
    this.schemaJson = schemaJson;
  }

  private static final class State {
    final GenericDatumReader<Object> reader;
    BinaryDecoder decoder;
    Object reuse;

    State(Schema schema) {
      this.reader = new GenericDatumReader<>(schema);
    }
  }

  private synchronized ThreadLocal<State> threadState() {
    if (state == null) {
      Schema schema = SCHEMAS.computeIfAbsent(schemaJson, json -> new Schema.Parser().parse(json));
      state = ThreadLocal.withInitial(() -> new State(schema));
    }
    return state;
  }

  @Override
  public Integer call(byte[] value) {
    if (value == null) {
      return null;
    }
    State s = threadState().get();
    s.decoder = DecoderFactory.get().binaryDecoder(value, s.decoder);
    try {
      s.reuse = s.reader.read(s.reuse, s.decoder);
      return s.decoder.isEnd() ? 0 : s.decoder.inputStream().available();
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }
}
