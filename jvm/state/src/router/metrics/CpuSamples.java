package router.metrics;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordedFrame;
import jdk.jfr.consumer.RecordedStackTrace;
import jdk.jfr.consumer.RecordedThread;
import jdk.jfr.consumer.RecordingFile;

/**
 * Where this JVM's CPU goes while it runs: the JVM's own sampling profiler (Flight Recorder's
 * execution samples) over a stretch of work, given back as folded stacks.
 *
 * <p>Every {@code period} the recorder takes the stack of each thread running Java code. {@link
 * #stop} gives each distinct (thread, stack) once with how many samples had it, as {@code
 * "thread name|outermost.frame;...;innermost.frame"}; a frame is its class and method name. Only
 * execution samples are recorded, so the recording costs little (measured: no change in the
 * router's batch times at a 10 ms period).
 */
public final class CpuSamples {
  private static final String EVENT = "jdk.ExecutionSample";
  private final Recording recording;

  private CpuSamples(Recording recording) {
    this.recording = recording;
  }

  /** Start sampling every {@code periodMs} milliseconds. */
  public static CpuSamples start(long periodMs) {
    Recording recording = new Recording();
    recording.enable(EVENT).withPeriod(Duration.ofMillis(periodMs)).withStackTrace();
    recording.setToDisk(true);
    recording.start();
    return new CpuSamples(recording);
  }

  /** Stop sampling; the folded stacks and their sample counts (see the class comment). */
  public Map<String, Integer> stop() throws IOException {
    recording.stop();
    Path file = Files.createTempFile("router-cpu-", ".jfr");
    try {
      recording.dump(file);
      Map<String, Integer> folded = new HashMap<>();
      for (RecordedEvent event : RecordingFile.readAllEvents(file)) {
        if (EVENT.equals(event.getEventType().getName())) {
          folded.merge(fold(event), 1, Integer::sum);
        }
      }
      return folded;
    } finally {
      recording.close();
      Files.deleteIfExists(file);
    }
  }

  private static String fold(RecordedEvent event) {
    RecordedThread thread = event.getThread("sampledThread");
    StringBuilder out = new StringBuilder(thread == null ? "?" : String.valueOf(thread.getJavaName()));
    out.append('|');
    RecordedStackTrace stack = event.getStackTrace();
    List<RecordedFrame> frames = stack == null ? List.of() : stack.getFrames();
    for (int i = frames.size() - 1; i >= 0; i--) {
      RecordedFrame frame = frames.get(i);
      out.append(frame.getMethod().getType().getName()).append('.').append(frame.getMethod().getName());
      if (i > 0) {
        out.append(';');
      }
    }
    return out.toString();
  }
}
