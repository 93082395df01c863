package router.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
}
