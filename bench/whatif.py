"""How long `router whatif` takes over a large window: `python -m bench.whatif [--messages N]`.

Writes N messages (default 1,000,000) with the benchmark's generator (`bench.common.prepare`: i1,
10 routes, 90% of the messages to the services the routes name, 10% to local services), then runs
`router whatif` as a user does (a process of its own, a new JVM) over the last N records, with a
change that moves one route to another address and drops another, `--runs` times. Prints one JSON
line with each run's wall time, the records it read and what it found; the aim is a minute for
1,000,000 messages on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import kafka, new_prefix, prepare, progress

CHANGE = """\
instance: i1
routes:
  - {scope: AW, name: R0, service: Svc0, address: "TCP://elsewhere.example:4022"}
"""
DROP = """\
-- instance: i1
USE AW;
DROP ROUTE R1;
"""
AIM_S = 60.0


def run(bootstrap: str | None, messages: int, runs: int) -> dict[str, object]:
    with kafka(bootstrap) as address, tempfile.TemporaryDirectory(prefix="bench-whatif-") as folder:
        prefix = new_prefix()
        started = time.monotonic()
        prepare(address, prefix, routes=10, messages=messages)
        progress(f"bench whatif: wrote {messages:,} messages in {time.monotonic() - started:.1f} s")
        files = [Path(folder) / "move.yaml", Path(folder) / "drop.sql"]
        files[0].write_text(CHANGE)
        files[1].write_text(DROP)
        command = [
            sys.executable, "-m", "streaming.cli", "whatif", *map(str, files), "--instance", "i1",
            "--max", str(messages), "--json", "--bootstrap", address, "--topic-prefix", prefix,
        ]  # fmt: skip
        results = []
        for n in range(runs):
            began = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            wall = time.monotonic() - began
            if done.returncode != 0:
                raise SystemExit(f"router whatif failed ({done.returncode}): {done.stderr.strip()}")
            report = json.loads(done.stdout)
            said = done.stderr.strip().splitlines()[-1]
            progress(f"bench whatif: run {n + 1}: {wall:.1f} s wall; {said}")
            results.append(
                {
                    "wall_s": round(wall, 1),
                    "decided": report["decided"],
                    "changed": report["changed"],
                    "changes": [
                        (c["from"]["outcome"], c["to"]["outcome"], c["messages"]) for c in report["changes"]
                    ],
                    "said": said,
                }
            )
        best = min(float(r["wall_s"]) for r in results)
        return {"messages": messages, "runs": results, "aim_s": AIM_S, "met": best < AIM_S}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", help="an existing broker (default: an embedded one)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(run(args.bootstrap, args.messages, args.runs)), flush=True)


if __name__ == "__main__":
    main()
