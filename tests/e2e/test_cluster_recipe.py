"""The README's cluster recipe, run as it is written there: the two cannot drift apart.

The test reads the `bash` block of the README's "On a Spark cluster" section and runs it with bash
in a folder of its own, with two changes a test needs: a free port instead of 7077, and a
`router.yaml` of its own (a fresh namespace on the test broker). Then it checks that the messages
were routed by executors on the cluster's two workers, with the executor memory the recipe's
`spark-defaults.conf` gives.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from processes import ROOT, wait_for
from test_faults import LATE, accounted, namespace, send_traffic

from streaming import topics
from streaming.devtools.embedded_kafka import free_port
from streaming.devtools.processes import command_line, end_group, group
from streaming.rules.model import Route
from streaming.tables.topic_io import put_route

pytestmark = [pytest.mark.e2e, pytest.mark.fault]  # a cluster to start: minutes, not seconds

SECTION = "### On a Spark cluster"


def recipe() -> str:
    """The first `bash` block after the README's cluster section heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert SECTION in text, f"the README has a section {SECTION!r}"
    found = re.search(r"```bash\n(.*?)```", text.split(SECTION, 1)[1], re.DOTALL)
    assert found, f"the README's {SECTION!r} section holds a bash block"
    return found.group(1)


def test_the_readme_cluster_recipe_routes_on_two_workers(kafka_bootstrap: str, tmp_path: Path) -> None:
    port = free_port()
    script = recipe().replace("7077", str(port))
    assert f"spark://127.0.0.1:{port}" in script, "the recipe points the router at the master it starts"
    prefix = namespace(kafka_bootstrap)
    traffic = send_traffic(kafka_bootstrap, prefix, 400)
    put_route(kafka_bootstrap, "i1", Route("AW", "Late", LATE, service="Late"), topics.routes_topic(prefix))
    (tmp_path / "router.yaml").write_text(
        f"instance: i1\nbootstrap: {kafka_bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {tmp_path / 'checkpoints' / 'i1'}\ntrigger_seconds: 0.5\n",
        encoding="utf-8",
    )
    log = tmp_path / "recipe.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    shell = subprocess.Popen(
        ["bash", "-euc", script],
        cwd=tmp_path,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(accounted(kafka_bootstrap, prefix, traffic), 300, "every message", shell, log)
        ui = re.search(r"web UI (http://127\.0\.0\.1:\d+)", log.read_text())
        assert ui, log.read_text()[-3000:]
        with urllib.request.urlopen(f"{ui.group(1)}/json/", timeout=10) as answer:
            master = json.load(answer)
        (app,) = master["activeapps"]
        assert app["memoryperexecutor"] == 768, app  # the recipe's spark-defaults.conf was read
        assert app["cores"] == 2, app  # an executor on each worker
        works = sorted((tmp_path / ".state" / "spark").glob("worker-*/work/app-*"))
        assert len(works) == 2, works
        # The recipe's last command, `router run`, stops on SIGTERM between micro-batches and exits 0.
        (router,) = [pid for pid in group(shell.pid) if b"run\0--config" in command_line(pid)]
        os.kill(router, signal.SIGTERM)
        assert shell.wait(120) == 0, log.read_text()[-3000:]
        assert "stopped between micro-batches" in log.read_text()
    finally:
        end_group(shell.pid, signal.SIGTERM, 60.0)
