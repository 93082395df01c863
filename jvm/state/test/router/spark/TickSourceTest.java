package router.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;

/** The tick's offsets and pace ({@link TickSource}): a new offset once the pace has passed. */
class TickSourceTest {

  @Test
  void aTickComesOncePerPaceAndItsOffsetsOnlyGrow() {
    assertTrue(TickSource.due(-1L, 1_000L)); // the first tick comes at once
    assertFalse(TickSource.due(999_999_999L, 1_000L));
    assertTrue(TickSource.due(1_000_000_000L, 1_000L));
    assertEquals(1_000_000L, TickSource.next(0L, 1_000_000L)); // the wall clock's millisecond
    // A wall clock that stepped back still gives a larger offset than the last.
    assertEquals(1_000_001L, TickSource.next(1_000_000L, 5L));
    // An offset the rate source left (seconds since its start) is far below any tick's.
    assertEquals(1_000_000L, TickSource.next(9L, 1_000_000L));
  }

  @Test
  void aQueryTicksEverySecondUntilItsPaceIsSetAndAgainOnceItIsForgotten() {
    String name = "router-tick-test";
    assertEquals(TickSource.DEFAULT_PACE_MS, TickSource.paceOf(name));
    TickSource.pace(name, 10_000L);
    assertEquals(10_000L, TickSource.paceOf(name));
    assertEquals(TickSource.DEFAULT_PACE_MS, TickSource.paceOf("router-another"));
    TickSource.forget(name);
    assertEquals(TickSource.DEFAULT_PACE_MS, TickSource.paceOf(name));
    assertThrows(IllegalArgumentException.class, () -> TickSource.pace(name, 0L));
  }

  /** A clock the test moves by hand, in milliseconds. */
  private static final class Clock {
    long ms;

    long nanos() {
      return ms * 1_000_000L;
    }

    long wall() {
      return 1_800_000_000_000L + ms;
    }
  }

  /** A query's tick after two rounds, 0 and 500 ms: the first ticked, the second had nothing new. */
  private static final class TwoRounds {
    final Clock clock = new Clock();
    final TickSource.Stream stream;
    final String first;

    TwoRounds(String name) {
      TickSource.forget(name);
      stream = new TickSource.Stream(name, clock::nanos, clock::wall);
      first = stream.latestOffset().json(); // the first round ticks at once
      clock.ms = 500L;
      assertEquals(first, stream.latestOffset().json());
    }

    String at(long ms) {
      clock.ms = ms;
      return stream.latestOffset().json();
    }
  }

  @Test
  void aBatchThatRanForAnySourceRestartsThePace() {
    String name = "router-tick-ran-test";
    TwoRounds rounds = new TwoRounds(name); // the second round's messages start a batch
    String first = rounds.first;
    TickSource.ran(name);
    // A second after the tick, but half a second after the batch's round: nothing new.
    assertEquals(first, rounds.at(1_000L));
    assertEquals(first, rounds.at(1_499L));
    // A second after the batch's round: the tick's own batch.
    assertTrue(Long.parseLong(rounds.at(1_500L)) > Long.parseLong(first));
    TickSource.forget(name);
  }

  @Test
  void withoutABatchTheTickKeepsItsOwnPace() {
    TwoRounds rounds = new TwoRounds("router-tick-idle-test");
    // No batch ran in between: a second after the last tick, the next.
    assertTrue(Long.parseLong(rounds.at(1_000L)) > Long.parseLong(rounds.first));
  }

  @Test
  void forgettingAQueryDropsTheNewsOfItsLastBatch() {
    String name = "router-tick-forget-test";
    TickSource.ran(name);
    TickSource.forget(name);
    assertNull(TickSource.tookRan(name));
    TickSource.ran(name);
    TickSource.ranDelaying(name, 2_000L);
    TickSource.ran(name); // a later batch that delayed nothing keeps the news of the one that did
    assertEquals(2_000L, TickSource.tookRan(name));
    assertNull(TickSource.tookRan(name)); // the news is taken once
    assertThrows(IllegalArgumentException.class, () -> TickSource.ranDelaying(name, -1L));
  }

  @Test
  void theTickComesWhenWhatABatchDelayedFallsDueWhateverRanSince() {
    String name = "router-tick-due-test";
    TickSource.forget(name);
    Clock clock = new Clock();
    TickSource.Stream stream = new TickSource.Stream(name, clock::nanos, clock::wall);
    String first = stream.latestOffset().json(); // round 0: its batch delays messages for 2 s
    TickSource.ranDelaying(name, 2_000L);
    clock.ms = 500L; // the delayed records' read-back starts a batch; the tick has nothing new
    assertEquals(first, stream.latestOffset().json());
    TickSource.ran(name);
    clock.ms = 1_000L;
    assertEquals(first, stream.latestOffset().json());
    clock.ms = 1_500L; // a second after the read-back's round: the pace's tick
    String paced = stream.latestOffset().json();
    assertTrue(Long.parseLong(paced) > Long.parseLong(first));
    TickSource.ran(name);
    clock.ms = 1_899L;
    assertEquals(paced, stream.latestOffset().json());
    // 2 s after the round that delayed them, less the state processor's margin: they fall due.
    clock.ms = 1_900L;
    String fell = stream.latestOffset().json();
    assertTrue(Long.parseLong(fell) > Long.parseLong(paced));
    TickSource.ran(name);
    clock.ms = 2_400L; // the due time is taken once: from here the pace again
    assertEquals(fell, stream.latestOffset().json());
    TickSource.forget(name);
  }

  @Test
  void theTickComesWhenTheResumedStatesTimersFallDue() {
    String name = "router-tick-resumed-test";
    TickSource.forget(name);
    Clock clock = new Clock();
    TickSource.Stream stream = new TickSource.Stream(name, clock::nanos, clock::wall);
    String first = stream.latestOffset().json(); // the first round of a query that resumed a checkpoint
    TickSource.ran(name);
    // The state store, read meanwhile, holds timers 700 ms and 2.2 s into the run (either twice).
    long start = clock.wall();
    TickSource.fallDue(name, List.of(start + 700L, start + 2_200L, start + 700));
    clock.ms = 500L;
    assertEquals(first, stream.latestOffset().json());
    TickSource.ran(name);
    clock.ms = 1_000L; // the first round from 700 ms, though the pace would wait until 1.5 s
    String resumed = stream.latestOffset().json();
    assertTrue(Long.parseLong(resumed) > Long.parseLong(first));
    TickSource.ran(name);
    clock.ms = 1_500L;
    assertEquals(resumed, stream.latestOffset().json());
    TickSource.ran(name);
    clock.ms = 2_000L;
    assertEquals(resumed, stream.latestOffset().json());
    TickSource.ran(name);
    clock.ms = 2_200L; // the second timer's round, before the pace's (3 s)
    String second = stream.latestOffset().json();
    assertTrue(Long.parseLong(second) > Long.parseLong(resumed));
    assertTrue(TickSource.tookResumed(name).isEmpty(), "the instants are taken once");
    TickSource.fallDue(name, List.of(start + 9_000L));
    TickSource.forget(name);
    assertTrue(TickSource.tookResumed(name).isEmpty(), "a forgotten query's instants are dropped");
  }
}
