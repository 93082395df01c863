"""A chain of instances for the forwarding tests: A's Client talks to B's Server through forwarder F.

    A (Sales: Client)  --Sales route ToServer-->  F (msdb only, forwarding on)  --msdb ToB-->  B
    B (Stock: Server)  --Stock route ToClient-->  F                             --msdb ToA-->  A

A and B deliver what arrives from outside by their msdb's AutoCreatedLocal route; F has no local
service and forwards by its msdb routes only (F2, F7). Every catalog gives one retry_s, so that one
router query can route A and B together (`instances: [A, B]`) while F runs in a process of its own.

Run as a script, this module is the sending side of a killed endpoint: it begins dialogs from A's
Client, sends on them, flushes, prints `sent`, and pumps until killed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from streaming import topics  # noqa: E402
from streaming.endpoint import Endpoint  # noqa: E402
from streaming.endpoint.protocol import RETRY_CAP_S, RETRY_FIRST_S  # noqa: E402
from streaming.rules.model import DEFAULT_HOPS, Database, Instance, Route  # noqa: E402
from streaming.tables.topic_io import publish_catalogs, put_route  # noqa: E402

SALES = Database("Sales", "a1a1a1a1-0000-0000-0000-0000000000a1", True, ("Client",))
STOCK = Database("Stock", "b1b1b1b1-0000-0000-0000-0000000000b1", True, ("Server",))


def msdb(n: int) -> Database:
    return Database("msdb", f"0d0d0d0d-0000-0000-0000-00000000000{n}", True, ())


A = Instance("A", "TCP://a:4022", (SALES, msdb(1)), retry_s=1.0)
F = Instance("F", "TCP://f:4022", (msdb(2),), forwarding=True, retry_s=1.0)
B = Instance("B", "TCP://b:4022", (STOCK, msdb(3)), retry_s=1.0)
G = Instance("G", "TCP://g:4022", (msdb(4),), forwarding=True, retry_s=1.0)
"""A second forwarder, for a loop: F and G each route Server to the other."""

CHAIN_ROUTES: dict[str, tuple[Route, ...]] = {
    "A": (
        Route("Sales", "ToServer", "TCP://f:4022", service="Server"),
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
    ),
    "F": (
        Route("msdb", "ToB", "TCP://b:4022", service="Server"),
        Route("msdb", "ToA", "TCP://a:4022", service="Client"),
    ),
    "B": (
        Route("Stock", "ToClient", "TCP://f:4022", service="Client"),
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
    ),
}


LOOP_ROUTES: dict[str, tuple[Route, ...]] = {
    "A": CHAIN_ROUTES["A"],
    "F": (Route("msdb", "ToG", "TCP://g:4022", service="Server"),),
    "G": (Route("msdb", "ToF", "TCP://f:4022", service="Server"),),
}


def new_chain(
    bootstrap: str, label: str, instances: Iterable[Instance], routes: dict[str, tuple[Route, ...]]
) -> str:
    """A fresh topic prefix holding the instances' catalogs and routes."""
    prefix = f"{label}{uuid.uuid4().hex[:8]}"
    publish_catalogs(bootstrap, list(instances), topics.catalogs_topic(prefix))
    for instance, rows in routes.items():
        for route in rows:
            put_route(bootstrap, instance, route, topics.routes_topic(prefix))
    return prefix


def settings_file(path: Path, bootstrap: str, prefix: str, instances: list[str], checkpoint: Path) -> Path:
    """A `router run` settings file for a query routing `instances`."""
    names = ", ".join(instances)
    path.write_text(
        f"instances: [{names}]\nbootstrap: {bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {checkpoint}\ntrigger_seconds: 0.5\nmax_offsets_per_trigger: 5000\n",
        encoding="utf-8",
    )
    return path


def client(
    bootstrap: str,
    prefix: str,
    store: Path,
    *,
    retry_first_s: float = RETRY_FIRST_S,
    retry_cap_s: float = RETRY_CAP_S,
    hops: int = DEFAULT_HOPS,
) -> Endpoint:
    """A's Client endpoint."""
    return Endpoint(
        bootstrap,
        instance="A",
        database="Sales",
        service="Client",
        store=store,
        prefix=prefix,
        retry_first_s=retry_first_s,
        retry_cap_s=retry_cap_s,
        hops=hops,
    )


def server(bootstrap: str, prefix: str, store: Path) -> Endpoint:
    """B's Server endpoint."""
    return Endpoint(bootstrap, instance="B", database="Stock", service="Server", store=store, prefix=prefix)


def start_sender(
    bootstrap: str, prefix: str, store: Path, dialogs: int, messages: int, log: Path
) -> subprocess.Popen[bytes]:
    """This module as a script: A's Client sends, then pumps until killed (its own process group)."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        bootstrap,
        prefix,
        str(store),
        str(dialogs),
        str(messages),
    ]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _send_then_pump() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("bootstrap", "prefix", "store"):
        parser.add_argument(name)
    parser.add_argument("dialogs", type=int)
    parser.add_argument("messages", type=int)
    args = parser.parse_args()
    endpoint = client(args.bootstrap, args.prefix, Path(args.store), retry_first_s=5.0, retry_cap_s=10.0)
    dialogs = [endpoint.begin_dialog("Server", lifetime_s=3600) for _ in range(args.dialogs)]
    for n in range(args.messages):
        for dialog in dialogs:
            dialog.send(f"{dialog.conversation_id}:{n}".encode())
    assert endpoint.flush(30) == 0  # every message is on A's outbound topic before `sent` is printed
    print("sent", flush=True)
    while True:
        endpoint.pump(0.5)
        time.sleep(0.1)


if __name__ == "__main__":
    _send_then_pump()
