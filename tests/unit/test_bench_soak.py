"""bench.soak: what it reads of a process and of the router's metrics, and the trends it fits."""

from __future__ import annotations

import argparse
import math
import os

import pytest

from bench.soak import (
    Sample,
    SoakPlan,
    SoakResult,
    histogram_total_mb,
    instances_of,
    metaspace_mb,
    nmt_committed_mb,
    open_files,
    proc_status,
    render,
    router_figures,
    rss_mb,
    slope_per_hour,
    trends,
    variable,
)

HEAP_INFO = """12316:
 PSYoungGen      total 607744K, used 128678K [0x00000000d5580000, 0x00000000fed00000, 0x0000000100000000)
  eden space 578048K, 21% used [0x00000000d5580000,0x00000000dccd1dd8,0x00000000f8a00000)
 ParOldGen       total 258048K, used 154384K [0x0000000080000000, 0x000000008fc00000, 0x00000000d5580000)
  object space 258048K, 59% used [0x0000000080000000,0x00000000896c43d0,0x000000008fc00000)
 Metaspace       used 34041K, committed 35840K, reserved 1114112K
  class space    used 5909K, committed 6784K, reserved 1048576K
"""
"""`jcmd <pid> GC.heap_info` of the router's JVM (the parallel collector), as JDK 17 prints it."""

HISTOGRAM = """12316:
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:        234237       81439768  [B (java.base@17.0.15)
   2:         11950       34583520  [J (java.base@17.0.15)
9277:             1             16  sun.util.resources.cldr.provider.CLDRLocaleDataMetaInfo
Total       2435876      197624472
"""


def test_a_class_count_is_read_from_its_own_line() -> None:
    assert instances_of(HISTOGRAM, "[B") == 234237
    assert instances_of(HISTOGRAM, "[J") == 11950
    assert instances_of(HISTOGRAM, "org.apache.avro.Schema$Field") == 0  # not listed: none live


def test_the_live_heap_is_the_class_histograms_total() -> None:
    assert histogram_total_mb(HISTOGRAM) == pytest.approx(197624472 / 1024 / 1024)
    with pytest.raises(ValueError, match="no Total line"):
        histogram_total_mb(HISTOGRAM.replace("Total", "Sum"))


def test_the_metaspace_is_its_own_line_not_the_class_spaces() -> None:
    assert metaspace_mb(HEAP_INFO) == pytest.approx(34041 / 1024)
    with pytest.raises(ValueError, match="no metaspace"):
        metaspace_mb("12316:\nCommand executed successfully\n")


NATIVE_SUMMARY = """12316:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=7842503KB, committed=484719KB
       malloc: 10111KB #60978
       mmap:   reserved=7832392KB, committed=474608KB

-                 Java Heap (reserved=6172672KB, committed=397312KB)
                            (mmap: reserved=6172672KB, committed=397312KB)
"""
"""`jcmd <pid> VM.native_memory summary scale=KB` of a JVM started with
`-XX:NativeMemoryTracking=summary`, as JDK 17 prints it (cut after the first category)."""


def test_the_native_memory_is_the_committed_total_not_a_categorys() -> None:
    assert nmt_committed_mb(NATIVE_SUMMARY) == pytest.approx(((484719 / 1024), (484719 - 397312) / 1024))
    # A diff's lines carry the change after each figure.
    diff = NATIVE_SUMMARY.replace("committed=484719KB", "committed=484723KB +5KB").replace(
        "reserved=6172672KB, committed=397312KB", "reserved=6172672KB +1KB, committed=397312KB"
    )
    assert nmt_committed_mb(diff) == pytest.approx(((484723 / 1024), (484723 - 397312) / 1024))
    with pytest.raises(ValueError, match="no Total or Java Heap line"):
        nmt_committed_mb("12316:\nNative memory tracking is not enabled\n")


def test_this_process_status_gives_its_resident_memory_and_threads() -> None:
    status = proc_status(os.getpid())
    assert rss_mb(status) > 1
    assert int(status["Threads"]) >= 1
    assert open_files(os.getpid()) >= 3  # stdin, stdout, stderr at least


METRICS = """# HELP router_batch_duration_seconds how long a micro-batch took (decide and write)
# TYPE router_batch_duration_seconds histogram
router_batch_duration_seconds_bucket{instance="i1",le="0.5"} 3.0
router_batch_duration_seconds_bucket{instance="i1",le="+Inf"} 5.0
router_batch_duration_seconds_count{instance="i1"} 5.0
router_batch_duration_seconds_sum{instance="i1"} 2.5
# HELP router_input_lag_records records of an input partition not yet read, after the last micro-batch
# TYPE router_input_lag_records gauge
router_input_lag_records{instance="i1",topic="a",partition="0"} 7.0
router_input_lag_records{instance="i1",topic="a",partition="1"} 3.0
# HELP router_batches_total micro-batches run
# TYPE router_batches_total counter
router_batches_total{instance="i1"} 5.0
"""


def test_router_figures_come_from_the_batch_histogram_and_every_partitions_lag() -> None:
    figures = router_figures(METRICS)
    assert (figures.batches, figures.batch_seconds, figures.lag) == (5, 2.5, 10)


def test_slope_per_hour_of_a_straight_line_is_its_slope() -> None:
    points = [(m, 100 + 0.5 * m) for m in (5.0, 6.0, 7.0, 8.0)]
    assert slope_per_hour(points) == pytest.approx(30.0)  # 0.5 a minute


def test_slope_per_hour_leaves_nan_values_out_and_needs_two_minutes() -> None:
    assert slope_per_hour([(1.0, 2.0), (2.0, math.nan), (3.0, 4.0)]) == pytest.approx(60.0)
    assert math.isnan(slope_per_hour([(1.0, 2.0), (2.0, math.nan)]))
    assert math.isnan(slope_per_hour([]))


def _sample(minute: float, heap: float, batch_s: float = 0.5) -> Sample:
    return Sample(
        minute=float(minute),
        heap_mb=float(heap),
        metaspace_mb=40.0,
        jvm_rss_mb=1000.0,
        python_rss_mb=150.0,
        jvm_threads=290,
        python_threads=28,
        open_files=440,
        checkpoint_mb=6.0,
        batches=int(minute * 60),
        batch_s=batch_s,
        lag=0,
    )


def test_trends_leave_the_warm_up_out() -> None:
    # The heap grows fast during the warm-up, then stays flat.
    samples = [_sample(0, 100), _sample(1, 200), _sample(2, 250), _sample(3, 250), _sample(4, 250)]
    heap = next(t for t in trends(samples, warm_up_minutes=2) if t.figure == "heap_mb")
    assert (heap.figure, heap.first, heap.last, heap.per_hour) == ("heap_mb", 250.0, 250.0, 0.0)
    assert math.isnan(heap.last_third_per_hour)  # too few samples for a third of their own
    grown = next(t for t in trends(samples, warm_up_minutes=0) if t.figure == "heap_mb")
    assert grown.per_hour > 0


def test_render_says_whether_every_message_arrived() -> None:
    samples = (_sample(0, 100), _sample(1, 100, batch_s=math.nan))
    plan = SoakPlan(minutes=1.0, rate=10, warm_up_minutes=0.0)
    done = SoakResult(plan, 600, 600, samples)
    text = "\n".join(render(done))
    assert "600 at their destinations (every one)" in text
    assert "| 1.000 | 100.0 |" in text and "n/a" in text  # a sample with no batch since the last
    short = SoakResult(plan, 600, 599, samples)
    assert "**not every one**" in "\n".join(render(short))


def test_the_native_memory_columns_and_growth_are_reported_only_when_tracked() -> None:
    samples = (_sample(0, 100), _sample(1, 100))
    untracked = "\n".join(render(SoakResult(SoakPlan(minutes=1.0, warm_up_minutes=0.0), 6, 6, samples)))
    assert "nmt_committed_mb" not in untracked and "```" not in untracked
    tracked_samples = tuple(
        Sample(**{**s.__dict__, "nmt_committed_mb": 500.0, "nmt_beside_heap_mb": 100.0}) for s in samples
    )
    plan = SoakPlan(minutes=1.0, warm_up_minutes=0.0, native_memory=True)
    text = "\n".join(render(SoakResult(plan, 6, 6, tracked_samples, NATIVE_SUMMARY)))
    assert "| nmt_committed_mb | nmt_beside_heap_mb |" in text
    assert "| nmt_committed_mb | 500.0 | 500.0 | +0.000 |" in text  # its trend, flat
    assert "Total: reserved=7842503KB, committed=484719KB" in text.split("```")[1]


def test_the_router_env_is_name_equals_value_and_joins_the_native_memory_option() -> None:
    assert variable("MALLOC_ARENA_MAX=2") == ("MALLOC_ARENA_MAX", "2")
    assert variable("EMPTY=") == ("EMPTY", "")
    for wrong in ("MALLOC_ARENA_MAX", "=2", "2X=1"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not NAME=VALUE"):
            variable(wrong)
    plan = SoakPlan(
        native_memory=True, router_env=(("MALLOC_ARENA_MAX", "2"), ("ROUTER_JVM_OPTIONS", "-Xss1m"))
    )
    assert plan.environment() == {
        "ROUTER_JVM_OPTIONS": "-XX:NativeMemoryTracking=summary -Xss1m",
        "MALLOC_ARENA_MAX": "2",
    }
    assert SoakPlan().environment() == {}
    text = "\n".join(render(SoakResult(SoakPlan(router_env=(("MALLOC_ARENA_MAX", "2"),)), 6, 6, ())))
    assert "The router's process ran with `MALLOC_ARENA_MAX=2`." in text


def test_the_last_third_tells_a_figure_that_levelled_off_from_one_still_growing() -> None:
    # RSS grows 10 MiB a minute for six minutes, then holds; the heap grows all along.
    samples = [_sample(m, 100 + 2 * m) for m in range(12)]
    samples = [Sample(**{**s.__dict__, "jvm_rss_mb": 1000.0 + 10 * min(s.minute, 6.0)}) for s in samples]
    by_figure = {t.figure: t for t in trends(samples, warm_up_minutes=0)}
    rss, heap = by_figure["jvm_rss_mb"], by_figure["heap_mb"]
    assert rss.per_hour > 200 and rss.last_third_per_hour == pytest.approx(0.0)
    assert heap.per_hour == pytest.approx(120.0) and heap.last_third_per_hour == pytest.approx(120.0)
    text = "\n".join(render(SoakResult(SoakPlan(warm_up_minutes=0.0), 6, 6, tuple(samples))))
    assert "| figure | first | last | per hour | per hour, last third |" in text
    assert "| heap_mb | 100.0 | 122.0 | +120.000 | +120.000 |" in text
