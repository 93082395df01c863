package router.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Set;

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

  /** A query's tick after its first round, at 0 ms, which ticks at once. */
  private static final class Rounds {
    final Clock clock = new Clock();
    final TickSource.Stream stream;
    final String first;

    Rounds(String name) {
      TickSource.forget(name);
      stream = new TickSource.Stream(name, clock::nanos, clock::wall);
      first = stream.latestOffset().json();
    }

    /** The latest offset the round at {@code ms} gives. */
    String at(long ms) {
      clock.ms = ms;
      return stream.latestOffset().json();
    }
  }

  /** A query's tick after two rounds, 0 and 500 ms: the first ticked, the second had nothing new. */
  private static Rounds twoRounds(String name) {
    Rounds rounds = new Rounds(name);
    assertEquals(rounds.first, rounds.at(500L));
    return rounds;
  }

  private static boolean later(String offset, String than) {
    return Long.parseLong(offset) > Long.parseLong(than);
  }

  @Test
  void aBatchThatRanForAnySourceRestartsThePace() {
    String name = "router-tick-ran-test";
    Rounds rounds = twoRounds(name); // the second round's messages start a batch
    TickSource.ran(name);
    // A second after the tick, but half a second after the batch's round: nothing new.
    assertEquals(rounds.first, rounds.at(1_000L));
    assertEquals(rounds.first, rounds.at(1_499L));
    // A second after the batch's round: the tick's own batch.
    assertTrue(later(rounds.at(1_500L), rounds.first));
    TickSource.forget(name);
  }

  @Test
  void withoutABatchTheTickKeepsItsOwnPace() {
    Rounds rounds = twoRounds("router-tick-idle-test");
    // No batch ran in between: a second after the last tick, the next.
    assertTrue(later(rounds.at(1_000L), rounds.first));
  }

  @Test
  void forgettingAQueryDropsTheNewsOfItsLastBatch() {
    String name = "router-tick-forget-test";
    TickSource.ranDelaying(name, 2_000L);
    TickSource.forget(name);
    assertFalse(TickSource.tookRan(name));
    assertTrue(TickSource.tookDue(name).isEmpty());
    TickSource.ran(name);
    TickSource.ranDelaying(name, 2_000L);
    TickSource.ran(name); // a later batch that delayed nothing keeps the due time of the one that did
    assertTrue(TickSource.tookRan(name));
    assertEquals(Set.of(2_000L - ConversationState.DUE_MARGIN_MS), TickSource.tookDue(name));
    assertFalse(TickSource.tookRan(name)); // the news is taken once
    assertThrows(IllegalArgumentException.class, () -> TickSource.ranDelaying(name, -1L));
  }

  @Test
  void theTickComesWhenWhatABatchDelayedFallsDueWhateverRanSince() {
    String name = "router-tick-due-test";
    Rounds rounds = new Rounds(name);
    // Round 0's batch began 300 ms late, its time: it delays messages for 2 s from then.
    TickSource.ranDelaying(name, rounds.clock.wall() + 300L + 2_000L);
    // The delayed records' read-back starts a batch; the tick has nothing new.
    assertEquals(rounds.first, rounds.at(500L));
    TickSource.ran(name);
    assertEquals(rounds.first, rounds.at(1_000L));
    String paced = rounds.at(1_500L); // a second after the read-back's round: the pace's tick
    assertTrue(later(paced, rounds.first));
    TickSource.ran(name);
    // 2 s after the batch's time, less the state processor's margin: they fall due; not 2 s after
    // its round (1,900 ms), when the state processor would hold them yet.
    assertEquals(paced, rounds.at(1_900L));
    assertEquals(paced, rounds.at(2_199L));
    String fell = rounds.at(2_200L);
    assertTrue(later(fell, paced));
    TickSource.ran(name);
    assertEquals(fell, rounds.at(2_700L)); // the due time is taken once: from here the pace again
    TickSource.forget(name);
  }

  @Test
  void theTickComesWhenTheResumedStatesTimersFallDue() {
    String name = "router-tick-resumed-test";
    Rounds rounds = new Rounds(name); // the first round of a query that resumed a checkpoint
    TickSource.ran(name);
    // The state store, read meanwhile, holds timers 700 ms and 2.2 s into the run (either twice).
    long start = rounds.clock.wall();
    TickSource.fallDue(name, List.of(start + 700L, start + 2_200L, start + 700));
    assertEquals(rounds.first, rounds.at(500L));
    TickSource.ran(name);
    String resumed = rounds.at(1_000L); // the first round from 700 ms, though the pace would wait until 1.5 s
    assertTrue(later(resumed, rounds.first));
    TickSource.ran(name);
    assertEquals(resumed, rounds.at(1_500L));
    TickSource.ran(name);
    assertEquals(resumed, rounds.at(2_000L));
    TickSource.ran(name);
    String second = rounds.at(2_200L); // the second timer's round, before the pace's (3 s)
    assertTrue(later(second, resumed));
    assertTrue(TickSource.tookDue(name).isEmpty(), "the instants are taken once");
    TickSource.fallDue(name, List.of(start + 9_000L));
    TickSource.forget(name);
    assertTrue(TickSource.tookDue(name).isEmpty(), "a forgotten query's instants are dropped");
  }
}
