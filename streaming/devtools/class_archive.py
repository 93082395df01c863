"""Record the driver JVM's class archive: `python -m streaming.devtools.class_archive [--out FILE]`.

`make setup` runs it once the jars are in place (and again when the router's jar changes). It
starts an embedded broker in a temporary folder, loads the demo's catalogs and routes
(`routes/demo/`), sends a little traffic (routed, forwarded, delayed), and routes instance i1's
part of it as the demo does, with the router's own session in a JVM that writes every
class it loaded into a dynamic CDS archive as it exits. Later driver JVMs map that archive instead
of finding, reading and verifying each class again (`streaming.spark.session.archive_options`).

The archive is written to a temporary name and renamed once the JVM has exited, so a run cut short
leaves no half-written archive behind. It takes about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from streaming.config import load_settings
from streaming.devtools.demo_data import load_demo
from streaming.devtools.embedded_kafka import EmbeddedKafka
from streaming.jars import driver_class_archive, project_root

JVM_EXIT_WAIT_S = 120.0
"""How long to wait for the driver JVM to write the archive and exit."""


def record(out: Path) -> None:
    """Run the demo's routing in a JVM that records its classes into `out` as it exits."""
    from streaming.spark.job import RouterJob
    from streaming.spark.session import build_session

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="router-class-archive-"))
    try:
        with EmbeddedKafka(folder / "kafka") as broker:
            bootstrap = broker.bootstrap
            prefix = "classes"
            load_demo(bootstrap, prefix, project_root() / "routes" / "demo", conversations=30, messages=2)
            spark = build_session("router-class-archive", record_classes=partial)
            settings = load_settings(
                None,
                instance="i1",
                bootstrap=bootstrap,
                topic_prefix=prefix,
                checkpoint_dir=str(folder / "checkpoint"),
            )
            job = RouterJob(spark, settings)
            try:
                job.replay()
            finally:
                job.close()
            spark.stop()
            _end_jvm()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if not partial.is_file():
        raise SystemExit(f"class archive: the driver JVM exited without writing {partial}")
    partial.replace(out)


def _end_jvm() -> None:
    """Close PySpark's gateway and wait until its JVM has exited (it writes the archive on exit)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        raise SystemExit("class archive: PySpark started no JVM of its own to record")
    gateway.shutdown()
    process.stdin.close()  # PySpark's JVM exits when its standard input closes
    deadline = time.monotonic() + JVM_EXIT_WAIT_S
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if process.poll() is None:
        raise SystemExit(
            f"class archive: the driver JVM had not exited {JVM_EXIT_WAIT_S:.0f} s after its stop"
        )
    SparkContext._gateway = None
    SparkContext._jvm = None


def main(argv: list[str] | None = None) -> int:
    """Record the archive into `--out`; say where and how large on stderr."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=driver_class_archive(), help="the archive (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    record(args.out)
    size = args.out.stat().st_size / 2**20
    print(
        f"class archive: {args.out} ({size:.0f} MiB) in {time.monotonic() - started:.0f} s", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
