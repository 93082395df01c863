"""`router explain MESSAGE_ID`: where one message went, hop by hop, and why its last decision was taken.

Service Broker's `sys.transmission_queue.transmission_status` says why a message has not left;
this router writes every decision into the records it produces, with the numbered rule steps that
took it, so one message's whole path can be read back from Kafka (`streaming.observe.explain`):
the record its service wrote, then each instance's decision (outcome, the topic it went to, route,
matching and choice step, reason, route snapshot), then where it is now. Every topic of the prefix
that carries messages is searched within the window (`--since`), never its whole history.

`--steps` takes the latest decision again with the reference engine, rule by rule
(`streaming.rules.explain`), against that instance's tables as they are now, and says whether
today's tables would decide otherwise than its headers record.

    router explain 7c9e...:0 --topic-prefix demo20261128100000
    router explain 7c9e...:0 --steps --since 2h
    router explain 7c9e...:0 --json

Exit status: 0 when the message is found, 1 when it is not (the topics and the window searched are
printed), 2 on an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    format_instant,
    kafka_from,
    utc_now,
)
from streaming.instants import parse_instant, window_start
from streaming.observe.explain import (
    DEAD_LETTERED,
    DEFAULT_SINCE,
    FoundRecord,
    Hop,
    MessagePath,
    NoReplay,
    Replay,
    assemble_path,
    decision_fields,
    kinds_count,
    not_found_json,
    not_found_text,
    read_tables,
    replay_instance,
    replay_latest,
    search_message,
)
from streaming.rules.explain import Step, describe_route
from streaming.rules.model import Message, Outcome

MOST_CONSIDERED = 12
"""Routes printed per step; the rest are counted (`--json` holds them all)."""


def register(subparsers: Any) -> None:
    """Add `explain`."""
    parser = subparsers.add_parser(
        "explain",
        help="find one message in the prefix's topics and print its path, hop by hop (--steps: why)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("message_id", metavar="MESSAGE_ID", help="the message_id of the message to find")
    parser.add_argument(
        "--since",
        default=DEFAULT_SINCE,
        metavar="SPAN|INSTANT",
        help="search the records written since then: a span before now (90s, 30m, 2h, 1d) or an ISO-8601 "
        f"instant such as 2026-11-28T10:00:00Z (default: {DEFAULT_SINCE})",
    )
    parser.add_argument(
        "--steps",
        action="store_true",
        help="also take the latest decision again, rule by rule (M1-M7, C0-C5, F-rules), with that "
        "instance's tables as they are now, and compare it with what its headers record",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_kafka_arguments(parser)
    add_prefix_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Search, assemble the path, replay its last decision with --steps; 1 when the message is not found."""
    now = utc_now()
    start = window_start(args.since, now)
    kafka = kafka_from(args)
    print(
        f"router explain: searching the topics of prefix {args.topic_prefix!r} from {format_instant(start)} "
        "to now",
        file=sys.stderr,
        flush=True,
    )
    search = search_message(kafka, args.topic_prefix, args.message_id, start, now)
    path = assemble_path(args.message_id, search.records, now)
    if path is None:
        if args.json:
            print(json.dumps(not_found_json(search, args.since)))
        else:
            print(not_found_text(search, args.since))
        return 1
    print(
        f"router explain: found {len(search.records)} record(s) in {len(search.topics)} topics "
        f"({kinds_count(search.topics)}), {search.read} record(s) read",
        file=sys.stderr,
        flush=True,
    )
    replay: Replay | NoReplay | None = None
    if args.steps:
        instance = replay_instance(path)
        tables = read_tables(kafka, args.topic_prefix, instance) if instance is not None else None
        replay = replay_latest(path, tables, now)
    if args.json:
        out = path_json(path)
        if replay is not None:
            out["steps"] = replay_json(replay)
        print(json.dumps(out))
        return 0
    print(render_path(path))
    if replay is not None:
        print()
        print(render_replay(replay))
    return 0


# --- text -----------------------------------------------------------------------------------------------


def _clock(instant: datetime | None, day: str | None) -> str:
    """`10:00:01.200` on the path's first day, else the whole instant."""
    if instant is None:
        return "?"
    if day is not None and (format_instant(instant) or "").startswith(day + "T"):
        return instant.astimezone(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    return format_instant(instant) or "?"


def _steps_cell(hop: Hop) -> str:
    if hop.outcome == DEAD_LETTERED:
        return "(no rule ran)"
    match_step, choice_step = hop.header("match_step"), hop.header("choice_step")
    route = hop.header("route")
    steps = ", ".join(s for s in (match_step, choice_step) if s)
    if match_step == "S4":
        return "reply shortcut (S4)"
    if choice_step is not None:
        return f"route {route or '(virtual LOCAL, M6)'} ({steps})"
    if match_step == "M7":
        return "no route (M7)"
    if match_step == "M4":
        return "route requested (M4)"
    if match_step is not None:
        return f"no usable route ({steps})"
    return "behind its conversation (D1)" if hop.outcome == Outcome.DELAYED.value else ""


def _hop_rows(path: MessagePath, day: str | None) -> list[list[str]]:
    rows: list[list[str]] = []
    for n, hop in enumerate(path.hops, start=1):
        outcome = hop.outcome
        if hop.header("reason"):
            outcome += f" ({hop.header('reason')})"
        if hop.copies > 1:
            outcome += f" x{hop.copies}"
        extra: list[str] = []
        if hop.outcome == Outcome.DELAYED.value:
            due = _clock(parse_instant(hop.header("due_at")), day)
            extra.append(f"attempt {hop.record.value.get('attempt')}, due {due}")
            if hop.released_at is not None:
                extra.append(f"released {_clock(hop.released_at, day)}")
        if hop.header("snapshot_version"):
            extra.append(f"snapshot {hop.header('snapshot_version')}")
        rows.append(
            [
                str(n),
                hop.instance,
                _clock(hop.decided_at, day),
                outcome,
                _steps_cell(hop),
                f"-> {hop.record.topic.name}",
                "  ".join(extra),
            ]
        )
    return rows


def _aligned(rows: list[list[str]], indent: str = "  ") -> list[str]:
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _heading(path: MessagePath) -> str:
    value = path.value
    target = str(value.get("to_service"))
    if value.get("to_broker_instance"):
        target += f" at broker instance {value['to_broker_instance']}"
    sender = f"{value.get('from_service')}"
    if value.get("origin_database"):
        sender += f" in {value['origin_database']}"
    what = f"message {path.message_id} (conversation {value.get('conversation_id')}, {target} from {sender})"
    if not path.sent:
        return f"{what}: the record it entered by is outside the window searched"
    first = path.sent[0]
    enqueued = value.get("enqueued_at")
    at = (
        format_instant(enqueued) if isinstance(enqueued, datetime) else format_instant(first.record.timestamp)
    )
    if first.record.topic.kind == "inbound":
        line = f"{what}, arrived {at} on {first.record.topic.name} from outside the known instances"
    else:
        line = f"{what}, sent {at} to {first.record.topic.name}"
    copies = sum(s.copies for s in path.sent)
    if copies > 1:
        line += f" ({copies} records of it: its endpoint resends an unacknowledged message with its id, A3)"
    return line


def render_path(path: MessagePath) -> str:
    """The path as text: the message, one line per hop, and where it is now."""
    first = format_instant(path.sent[0].record.timestamp if path.sent else path.hops[0].decided_at)
    day = first[:10] if first is not None else None
    lines = [_heading(path), *_aligned(_hop_rows(path, day))]
    for n, hop in enumerate(path.hops, start=1):
        if hop.outcome == DEAD_LETTERED:
            lines.append(
                f"     {n}: error: {hop.header('error')} (read from {hop.header('source_topic')}"
                f"[{hop.header('source_partition')}]@{hop.header('source_offset')})"
            )
        elif hop.header("destination") is not None:
            lines.append(f"     {n}: could not write to {hop.header('destination')}: {hop.header('error')}")
    lines.append(f"now: {path.state.text}")
    return "\n".join(lines)


def _considered_lines(step: Step) -> list[str]:
    shown = step.considered[:MOST_CONSIDERED]
    lines = [f"         {'+' if c.taken else '-'} {describe_route(c.route)}: {c.why}" for c in shown]
    if len(step.considered) > MOST_CONSIDERED:
        lines.append(
            f"         ... and {len(step.considered) - MOST_CONSIDERED} more (--json lists them all)"
        )
    return lines


def _message_line(message: Message) -> str:
    origin = (
        "from another instance (origin remote)" if message.is_remote else f"from database {message.origin}"
    )
    broker = message.broker_instance or "no broker instance"
    side = "the target's reply" if message.from_target else "the initiator's message"
    return (
        f"  message: to {message.service}, {broker}, {origin}, {side}, "
        f"hops_remaining {message.hops_remaining}, {message.size_bytes} bytes"
    )


def render_replay(replay: Replay | NoReplay) -> str:
    """The replayed decision as text: each step with its rule id, today's verdict, the assumptions."""
    if isinstance(replay, NoReplay):
        return f"steps: {replay.why}"
    if replay.hop is not None:
        head = (
            f"steps: {replay.instance}'s decision of {format_instant(replay.hop.decided_at)}, taken again "
            f"with {replay.instance}'s tables now ({replay.tables_version})"
        )
    else:
        head = f"steps: what {replay.instance} would decide now, with its tables ({replay.tables_version})"
    lines = [head, _message_line(replay.account.message)]
    for step in replay.account.steps:
        lines.append(f"  {step.rule:<6} {'*' if step.ended else ' '} {step.verdict}")
        lines.extend(_considered_lines(step))
    lines.append(replay.comparison)
    if replay.assumptions:
        lines.append("assumed (state Kafka does not hold):")
        lines.extend(f"  - {note}" for note in replay.assumptions)
    return "\n".join(lines)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_instant(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def path_json(path: MessagePath) -> dict[str, Any]:
    """The path as one JSON object."""

    def where(record: FoundRecord) -> dict[str, Any]:
        return {
            "topic": record.topic.name,
            "kind": record.topic.kind,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": format_instant(record.timestamp),
        }

    return {
        "message_id": path.message_id,
        "found": True,
        "message": {k: _json_value(v) for k, v in path.value.items() if k != "body"},
        "sent": [{**where(s.record), "copies": s.copies} for s in path.sent],
        "hops": [
            {
                "n": n,
                "instance": hop.instance,
                "decided_at": format_instant(hop.decided_at),
                "outcome": hop.outcome,
                **where(hop.record),
                "headers": dict(hop.record.headers),
                "attempt": hop.record.value.get("attempt"),
                "hops_remaining": hop.record.value.get("hops_remaining"),
                "copies": hop.copies,
                "released_at": format_instant(hop.released_at),
            }
            for n, hop in enumerate(path.hops, start=1)
        ],
        "now": {"state": path.state.kind, "text": path.state.text},
    }


def replay_json(replay: Replay | NoReplay) -> dict[str, Any]:
    """The replayed decision as one JSON object."""
    if isinstance(replay, NoReplay):
        return {"replayed": False, "why": replay.why}
    decision = replay.account.decision
    return {
        "replayed": True,
        "instance": replay.instance,
        "decided_at": format_instant(replay.hop.decided_at) if replay.hop is not None else None,
        "tables_version": replay.tables_version,
        "steps": [
            {
                "rule": step.rule,
                "verdict": step.verdict,
                "ended": step.ended,
                "considered": [
                    {"route": c.route.name, "as": describe_route(c.route), "taken": c.taken, "why": c.why}
                    for c in step.considered
                ],
            }
            for step in replay.account.steps
        ],
        "today": {**decision_fields(decision), "database": decision.database, "address": decision.address},
        "recorded": dict(replay.recorded),
        "differs": list(replay.differs),
        "comparison": replay.comparison,
        "assumptions": list(replay.assumptions),
    }
