package router.avro;

import java.io.IOException;

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
 */
public final class TrailingBytes implements UDF1<byte[], Integer> {
  private static final long serialVersionUID = 1L;

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
      Schema schema = new Schema.Parser().parse(schemaJson);
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
