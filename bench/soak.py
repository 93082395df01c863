"""How `router run` holds up over a long run: its memory, threads, files and batch times, sampled.

usage: python -m bench.soak [--minutes M] [--rate R] [--every S] [--warm-up-minutes W]
                            [--native-memory] [--router-env NAME=VALUE ...]
                            [--bootstrap HOST:PORT] [--out FILE]

A router that runs for months must not grow. This runs `router run` as a user runs it
(`bench.router_process.RouterProcess`, with its metrics served) under a steady load of `rate`
messages a second (the benchmark's records, `bench.common.message_values`) for `minutes`, and every
`every` seconds samples what would grow if something leaked. Every conversation of the load is new,
and keeps its choice (K2) for `keep_choice_s` (`KEEP_CHOICE_S`, shorter than the router's default):
the state grows for that long, then holds steady. The samples:

* the JVM's live heap (`jcmd GC.class_histogram`, which collects first): what the router keeps alive;
  its metaspace (classes: Spark generates code per plan, and a plan made again per batch would
  load classes without end);
* the resident memory of the JVM and of the Python driver (`/proc`), their threads and open files;
* the checkpoint's size on disk (offsets, commits, the state store's versions);
* the batches run and their mean duration over the interval, and the input's lag (the router's
  own metrics, `/metrics`);
* with --native-memory, what the JVM's own account of its memory (Native Memory Tracking, `jcmd
  VM.native_memory`) says it has committed, with and without its heap: what grows in its resident
  memory and not there is memory the JVM does not account for, as RocksDB's, the compression
  codecs' and the C library allocator's. The router's JVM then runs with
  `-XX:NativeMemoryTracking=summary`, given through `ROUTER_JVM_OPTIONS`, which costs it some CPU; at
  the end of the warm-up the soak takes the JVM's baseline, and the report ends with its account
  of what grew since, by category.

--router-env NAME=VALUE sets a variable for the router's process alone (and its JVM), to compare
two runs that differ in it: `MALLOC_ARENA_MAX=2`, say, which bounds the C library allocator's arenas.

After the warm-up (the JIT and the first allocations), each figure's trend is fitted (least
squares) and reported per hour, beside its first and last value, and fitted again over the last
third of those samples: a figure that grew early and then levelled off has a rising slope over
the whole run and a flat one at its end. At the end, every message
offered must have reached its destination: the run counts them.

Without --bootstrap it starts the embedded broker on a free port. The results (a Markdown report)
go to stdout, or to --out; progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from bench.common import (
    I1,
    destination_topics,
    kafka,
    message_values,
    new_prefix,
    prepare,
    progress,
    records_in,
    routes_for,
)
from bench.latency import LOAD_PRODUCER, wait_for_records
from bench.memory import folder_mb
from bench.router_process import RouterProcess
from streaming import topics
from streaming.devtools.embedded_kafka import free_port
from streaming.devtools.processes import children
from streaming.spark.session import JVM_OPTIONS_ENV

ROUTES = 10
DRAIN_S = 120.0
KEEP_CHOICE_S = 180.0
"""The soak's `keep_choice_s` (K2; the router's default is 3600): every conversation of the load is
new and keeps its choice in the state store that long, so the state grows for that long and then
holds steady, as new choices replace expiring ones. Shorter than the run, so the run sees both."""


@dataclass(frozen=True)
class Sample:
    """What the router process holds at one instant of the run."""

    minute: float
    """Minutes since the load began."""
    heap_mb: float
    """The bytes of the JVM's live objects (after a full collection): what the router keeps alive."""
    metaspace_mb: float
    jvm_rss_mb: float
    python_rss_mb: float
    jvm_threads: int
    python_threads: int
    open_files: int
    """Open file descriptors of both processes."""
    checkpoint_mb: float
    batches: int
    """Micro-batches run so far."""
    batch_s: float
    """Mean duration of the micro-batches run since the sample before (NaN when none ran)."""
    lag: int
    """Input records not yet read after the last micro-batch, every partition's."""
    nmt_committed_mb: float = float("nan")
    """The memory the JVM says it has committed (Native Memory Tracking's total, the heap
    included); NaN when it does not track it."""
    nmt_beside_heap_mb: float = float("nan")
    """The same less the Java heap's: threads, classes, code, the collector's, direct buffers...;
    NaN when not tracked. Committed pages need not all be resident, so neither figure is part
    of `jvm_rss_mb` to subtract from it; what grows in the resident memory and in neither of
    these is outside the JVM's account (RocksDB's, the codecs', the C library allocator's)."""


TRENDED = tuple(f.name for f in fields(Sample) if f.name not in ("minute", "batches"))
"""The figures whose trend is reported: each should stay flat once the router is warm."""


# --- reading a process -----------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, str]:
    """`/proc/<pid>/status` as name -> value."""
    lines = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace").splitlines()
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


def rss_mb(status: Mapping[str, str]) -> float:
    """Resident memory in MiB from a `/proc/<pid>/status` (`VmRSS:   123456 kB`)."""
    return int(status["VmRSS"].split()[0]) / 1024


def open_files(pid: int) -> int:
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


def router_jvm(driver: int) -> int:
    """The pid of the router's JVM: the child of its Python driver that runs java (PySpark starts it)."""
    for pid in children(driver):
        try:
            if Path(f"/proc/{pid}/comm").read_text(encoding="ascii", errors="replace").strip() == "java":
                return pid
        except OSError:
            continue  # ended meanwhile
    raise LookupError(f"no JVM among the child processes of {driver}")


_METASPACE = re.compile(r"^ Metaspace\s.*?used (\d+)K", re.MULTILINE)
_TOTAL = re.compile(r"^Total\s+(\d+)\s+(\d+)\s*$", re.MULTILINE)


def histogram_total_mb(text: str) -> float:
    """The bytes of every live object, in MiB, from `jcmd <pid> GC.class_histogram` (its `Total` line)."""
    found = _TOTAL.search(text)
    if found is None:
        raise ValueError(f"no Total line in GC.class_histogram's output:\n{text[-2000:]}")
    return int(found.group(2)) / (1024 * 1024)


def instances_of(text: str, class_name: str) -> int:
    """The live instances of `class_name` in a `jcmd <pid> GC.class_histogram` (0 when none is listed)."""
    line = re.compile(r"^\s*\d+:\s+(\d+)\s+\d+\s+" + re.escape(class_name) + r"(\s|$)", re.MULTILINE)
    found = line.search(text)
    return int(found.group(1)) if found else 0


def metaspace_mb(text: str) -> float:
    """The metaspace in use, in MiB, from `jcmd <pid> GC.heap_info`."""
    found = _METASPACE.search(text)
    if found is None:
        raise ValueError(f"no metaspace figure in GC.heap_info's output:\n{text}")
    return int(found.group(1)) / 1024


def jcmd(pid: int, command: str) -> str:
    """What `jcmd <pid> <command>` prints (`GC.class_histogram` collects the heap first)."""
    done = subprocess.run(["jcmd", str(pid), command], check=True, capture_output=True, timeout=120)
    return done.stdout.decode(errors="replace")


NATIVE_MEMORY_TRACKING = {JVM_OPTIONS_ENV: "-XX:NativeMemoryTracking=summary"}
"""The environment that has the router's JVM track its native memory (`streaming.spark.session`)."""

_NMT_TOTAL = re.compile(r"^Total: reserved=\d+KB[^,]*, committed=(\d+)KB", re.MULTILINE)
_NMT_HEAP = re.compile(r"^-\s+Java Heap \(reserved=\d+KB[^,]*, committed=(\d+)KB", re.MULTILINE)


def nmt_committed_mb(text: str) -> tuple[float, float]:
    """(the committed total, the same less the Java heap's), in MiB, from
    `jcmd <pid> VM.native_memory summary scale=KB`."""
    total, heap = _NMT_TOTAL.search(text), _NMT_HEAP.search(text)
    if total is None or heap is None:
        raise ValueError(f"no Total or Java Heap line in VM.native_memory's output:\n{text[-2000:]}")
    return int(total.group(1)) / 1024, (int(total.group(1)) - int(heap.group(1))) / 1024


def live_heap(pid: int) -> tuple[float, float]:
    """(the heap its live objects take, the metaspace in use), in MiB, of the JVM `pid`.

    The class histogram collects the whole heap first and counts only what survives: the live set,
    which a reading of the heap's use after a collection would blur with what the running router
    allocates meanwhile.
    """
    return histogram_total_mb(jcmd(pid, "GC.class_histogram")), metaspace_mb(jcmd(pid, "GC.heap_info"))


@dataclass(frozen=True)
class RouterFigures:
    """What the router's `/metrics` says: batches run, their total seconds, the input's lag."""

    batches: int
    batch_seconds: float
    lag: int


def router_figures(text: str) -> RouterFigures:
    """From the router's `/metrics` text (`streaming.spark.metrics`)."""
    batches, seconds, lag = 0.0, 0.0, 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "router_batch_duration_seconds_count":
                batches += s.value
            elif s.name == "router_batch_duration_seconds_sum":
                seconds += s.value
            elif s.name == "router_input_lag_records":
                lag += s.value
    return RouterFigures(int(batches), seconds, int(lag))


def scrape(port: int) -> RouterFigures:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return router_figures(response.read().decode())


# --- the trends ------------------------------------------------------------------------------------


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (minute, value) points, per hour; NaN for fewer than two minutes."""
    usable = [(x, y) for x, y in points if y == y]  # NaN values left out
    if len({x for x, _ in usable}) < 2:
        return float("nan")
    n = len(usable)
    mx = sum(x for x, _ in usable) / n
    my = sum(y for _, y in usable) / n
    sxx = sum((x - mx) ** 2 for x, _ in usable)
    sxy = sum((x - mx) * (y - my) for x, y in usable)
    return sxy / sxx * 60


@dataclass(frozen=True)
class Trend:
    figure: str
    first: float
    last: float
    per_hour: float
    """The slope over every sample after the warm-up."""
    last_third_per_hour: float = float("nan")
    """The slope over the last third of those samples: whether the figure still grows at the end,
    or grew early and levelled off (the whole run's slope cannot tell the two apart)."""


def trends(samples: Sequence[Sample], warm_up_minutes: float) -> list[Trend]:
    """Each `TRENDED` figure's trend over the samples taken after `warm_up_minutes`, and over the
    last third of them."""
    kept = [s for s in samples if s.minute >= warm_up_minutes]
    late = kept[len(kept) - len(kept) // 3 :] if len(kept) >= 6 else []
    out = []
    for name in TRENDED:
        points = [(s.minute, float(getattr(s, name))) for s in kept]
        values = [y for _, y in points if y == y]
        if not values:
            continue
        late_points = [(s.minute, float(getattr(s, name))) for s in late]
        out.append(Trend(name, values[0], values[-1], slope_per_hour(points), slope_per_hour(late_points)))
    return out


# --- the run ---------------------------------------------------------------------------------------


class SteadyLoad:
    """`rate` messages a second to the instance's outbound topic, in a thread, until stopped."""

    def __init__(self, bootstrap: str, prefix: str, rate: int) -> None:
        self.topic = topics.outbound_topic(I1.name, prefix)
        self.producer = Producer({"bootstrap.servers": bootstrap, **LOAD_PRODUCER})
        self.rate = rate
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        second = 0
        while not self._stop.is_set():
            for key, value in message_values(self.rate, ROUTES - 2, tag=f"s{second}-"):
                self.producer.produce(self.topic, value, key)
                self.producer.poll(0)
            self.sent += self.rate
            second += 1
            ahead = started + second - time.monotonic()
            if ahead > 0:
                self._stop.wait(ahead)

    def stop(self) -> int:
        """Stop, deliver what is queued; the messages sent."""
        self._stop.set()
        self._thread.join()
        if self.producer.flush(60):
            raise RuntimeError(f"soak: records to {self.topic} still undelivered after 60 s")
        return self.sent


def sample(
    router: RouterProcess,
    java: int,
    port: int,
    minute: float,
    before: RouterFigures | None,
    native_memory: bool,
) -> tuple[Sample, RouterFigures]:
    """What the router (its Python driver, and `java`, its JVM) holds now."""
    assert router.process is not None
    python = router.process.pid
    heap, metaspace = live_heap(java)
    figures = scrape(port)
    jvm, py = proc_status(java), proc_status(python)
    nan = float("nan")
    native, beside_heap = (
        nmt_committed_mb(jcmd(java, "VM.native_memory summary scale=KB")) if native_memory else (nan, nan)
    )
    ran = figures.batches - (before.batches if before else 0)
    took = figures.batch_seconds - (before.batch_seconds if before else 0.0)
    return (
        Sample(
            minute=minute,
            heap_mb=heap,
            metaspace_mb=metaspace,
            jvm_rss_mb=rss_mb(jvm),
            python_rss_mb=rss_mb(py),
            jvm_threads=int(jvm["Threads"]),
            python_threads=int(py["Threads"]),
            open_files=open_files(java) + open_files(python),
            checkpoint_mb=folder_mb(router.folder / "checkpoint"),
            batches=figures.batches,
            batch_s=took / ran if ran else float("nan"),
            lag=figures.lag,
            nmt_committed_mb=native,
            nmt_beside_heap_mb=beside_heap,
        ),
        figures,
    )


@dataclass(frozen=True)
class SoakPlan:
    """What a soak runs: the load, for how long, how often it looks, and the router's `keep_choice_s`."""

    minutes: float = 20.0
    rate: int = 2_000
    """Messages a second offered."""
    every_s: float = 60.0
    """Seconds between samples."""
    warm_up_minutes: float = 5.0
    """Minutes left out of the trends: the JIT, the first allocations, the state growing (`KEEP_CHOICE_S`)."""
    keep_choice_s: float = KEEP_CHOICE_S
    native_memory: bool = False
    """Have the JVM track its native memory (`NATIVE_MEMORY_TRACKING`) and sample its account."""
    router_env: tuple[tuple[str, str], ...] = ()
    """Variables set for the router's process alone (name, value)."""

    def environment(self) -> dict[str, str]:
        """The variables the router's process runs with beside this process's own."""
        environment = dict(NATIVE_MEMORY_TRACKING) if self.native_memory else {}
        for name, value in self.router_env:
            joined = (environment.get(name, ""), value) if name == JVM_OPTIONS_ENV else ("", value)
            environment[name] = " ".join(part for part in joined if part)
        return environment


@dataclass(frozen=True)
class SoakResult:
    plan: SoakPlan
    offered: int
    arrived: int
    samples: tuple[Sample, ...]
    native_growth: str = ""
    """With `native_memory`: the JVM's account of its native memory at the last sample against the
    baseline taken at the end of the warm-up (`jcmd VM.native_memory summary.diff`); else empty."""

    @property
    def trends(self) -> list[Trend]:
        return trends(self.samples, self.plan.warm_up_minutes)


def soak(bootstrap: str, plan: SoakPlan) -> SoakResult:
    """`router run` under the plan's load, sampled (module docstring); its checkpoint removed after."""
    prefix = new_prefix()
    prepare(bootstrap, prefix, ROUTES, messages=0)
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="router-soak-"))
    names = destination_topics(prefix, I1, routes_for(ROUTES))
    settings = {"metrics_port": port, "keep_choice_s": plan.keep_choice_s}
    samples: list[Sample] = []
    baseline, growth = False, ""
    try:
        with RouterProcess(
            bootstrap, prefix, folder, environment=plan.environment(), settings=settings
        ) as router:
            progress(f"soak: started router run on {prefix}; waiting until it routes")
            router.wait_until_routing()
            assert router.process is not None
            java = router_jvm(router.process.pid)
            load = SteadyLoad(bootstrap, prefix, plan.rate)
            started = time.monotonic()
            load.start()
            progress(
                f"soak: offering {plan.rate:,} msg/s for {plan.minutes:g} min, "
                f"a sample every {plan.every_s:g} s"
            )
            figures: RouterFigures | None = None
            while (elapsed := time.monotonic() - started) < plan.minutes * 60:
                router.ensure_running("the soak ended")
                taken, figures = sample(router, java, port, elapsed / 60, figures, plan.native_memory)
                samples.append(taken)
                native = (
                    f"committed by its own account {taken.nmt_committed_mb:,.0f} MiB "
                    f"({taken.nmt_beside_heap_mb:,.0f} beside the heap), "
                    if plan.native_memory
                    else ""
                )
                progress(
                    f"soak: {taken.minute:5.1f} min: heap {taken.heap_mb:,.0f} MiB, JVM RSS "
                    f"{taken.jvm_rss_mb:,.0f} MiB, {native}checkpoint {taken.checkpoint_mb:,.1f} MiB, "
                    f"{taken.batches:,} batches ({taken.batch_s:.3f} s each), lag {taken.lag:,}"
                )
                if plan.native_memory and not baseline and taken.minute >= plan.warm_up_minutes:
                    jcmd(java, "VM.native_memory baseline")
                    baseline = True
                time.sleep(max(0.0, started + len(samples) * plan.every_s - time.monotonic()))
            if baseline:
                growth = jcmd(java, "VM.native_memory summary.diff scale=KB")
            offered = load.stop()
            progress(f"soak: offered {offered:,} messages; waiting for the router to route them")
            # The probe `wait_until_routing` sent is in a destination too.
            wait_for_records(bootstrap, names, offered + 1, DRAIN_S)
            arrived = records_in(bootstrap, names) - 1
            progress(f"soak: {router.stop().describe()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return SoakResult(plan, offered, arrived, tuple(samples), growth)


# --- the report ------------------------------------------------------------------------------------


def _cell(value: float | int) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return "n/a" if value != value else f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"


def render(result: SoakResult) -> list[str]:
    """The report: the run, every sample, each figure's trend after the warm-up, and with
    `native_memory` the JVM's account of its native memory's growth."""
    plan = result.plan
    untracked = ("nmt_committed_mb", "nmt_beside_heap_mb")
    names = [f.name for f in fields(Sample) if plan.native_memory or f.name not in untracked]
    lines = [
        "# The router over a long run",
        "",
        f"`router run` under {plan.rate:,} msg/s for {plan.minutes:g} minutes (`python -m bench.soak`), "
        f"every conversation new and keeping its choice for {plan.keep_choice_s:g} s (`keep_choice_s`): "
        f"{result.offered:,} messages offered, {result.arrived:,} at their destinations"
        + (" (every one)." if result.arrived == result.offered else " (**not every one**).")
        + "".join(f" The router's process ran with `{name}={value}`." for name, value in plan.router_env),
        "",
        "| " + " | ".join(names) + " |",
        "|" + "---:|" * len(names),
    ]
    for s in result.samples:
        lines.append("| " + " | ".join(_cell(getattr(s, n)) for n in names) + " |")
    lines += [
        "",
        f"Trends after the first {plan.warm_up_minutes:g} minutes (least squares over those samples):",
        "",
        "| figure | first | last | per hour | per hour, last third |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in result.trends:
        slope, late = ("n/a" if v != v else f"{v:+,.3f}" for v in (t.per_hour, t.last_third_per_hour))
        lines.append(f"| {t.figure} | {_cell(t.first)} | {_cell(t.last)} | {slope} | {late} |")
    if result.native_growth:
        lines += [
            "",
            "The JVM's own account of its native memory (Native Memory Tracking), at the last sample "
            f"against the end of the first {plan.warm_up_minutes:g} minutes "
            "(`jcmd VM.native_memory summary.diff`):",
            "",
            "```",
            *result.native_growth.strip().splitlines(),
            "```",
        ]
    return lines


OPTIONS = (
    ("--minutes", "minutes", "how long the load runs"),
    ("--rate", "rate", "messages a second offered"),
    ("--every", "every_s", "seconds between samples"),
    ("--warm-up-minutes", "warm_up_minutes", "minutes left out of the trends"),
    ("--keep-choice-s", "keep_choice_s", "the router's keep_choice_s: how long the state grows"),
)
"""The command line's options: each sets the `SoakPlan` field it names."""


def variable(text: str) -> tuple[str, str]:
    """NAME=VALUE as (name, value), for --router-env."""
    name, equals, value = text.partition("=")
    if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (for example MALLOC_ARENA_MAX=2)")
    return name, value


def main() -> None:
    default = SoakPlan()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for option, field, what in OPTIONS:
        value = getattr(default, field)
        parser.add_argument(
            option, dest=field, type=type(value), default=value, help=f"{what} (default {value:g})"
        )
    parser.add_argument(
        "--native-memory",
        action="store_true",
        help="have the router's JVM track its native memory and sample its account (costs some CPU)",
    )
    parser.add_argument(
        "--router-env",
        action="append",
        type=variable,
        default=[],
        metavar="NAME=VALUE",
        help="set a variable for the router's process alone (repeat for more), e.g. MALLOC_ARENA_MAX=2",
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    parser.add_argument("--out", type=Path, help="write the report here (default: stdout)")
    args = parser.parse_args()
    plan = SoakPlan(
        **{field: getattr(args, field) for _, field, _ in OPTIONS},
        native_memory=args.native_memory,
        router_env=tuple(args.router_env),
    )
    with kafka(args.bootstrap) as bootstrap:
        result = soak(bootstrap, plan)
    text = "\n".join(render(result)) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        progress(f"soak: wrote {args.out}")
    else:
        print(text, end="")
    if result.arrived != result.offered:
        raise SystemExit(
            f"soak: {result.offered - result.arrived:,} messages did not reach their destinations"
        )


if __name__ == "__main__":
    main()
