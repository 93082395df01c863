"""What a routing service does with one message, as pure functions: no Kafka, no store."""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from enum import Enum
from xml.sax.saxutils import escape

from streaming.endpoint.protocol import DESCRIPTION_MAX, END_DIALOG, ERROR
from streaming.errors import MalformedRecord

REDIRECT_MESSAGE_TYPE = "router.v1/DataDependentRouting/Redirect"
"""The answer of a redirecting routing service: `<redirect><service/><broker_instance/></redirect>`."""
CLASSIFY_FAILED = 1
"""The Error code a routing service ends a dialog with when it cannot classify its first message."""
FORWARDED_ERROR = 2
"""The Error code of a forwarded error whose own code is the broker's (not > 0, §1.15)."""
DIALOG_CLOSED = 3
"""The Error code a routing service ends a conversation with when one of its dialogs cannot carry
what the other brought (it ended, failed, or its lifetime passed)."""
_OUTBOUND_IDS = uuid.UUID("0c7e5f2a-4b6d-4e8f-9a1b-3d5c7e9f1a2b")
"""The namespace of outbound dialog ids, derived from the routing service and the inbound dialog."""


@dataclass(frozen=True)
class Classification:
    """Where a first message goes: a service (and maybe a broker instance), or why it cannot go."""

    service: str | None = None
    broker_instance: str | None = None
    error: str | None = None


class Mode(str, Enum):
    """What a routing service does with a classified conversation."""

    FORWARD = "forward"
    REDIRECT = "redirect"


@dataclass(frozen=True)
class Mapping:
    """An inbound dialog and the outbound dialog it was forwarded on (`resolved_conversations`)."""

    inbound: str
    outbound: str
    service: str
    broker_instance: str | None = None


class Act(str, Enum):
    """One step of the answer to a message."""

    BEGIN = "begin"
    """Begin the outbound dialog (`mapping`) and keep the mapping."""
    SEND_OUT = "send_out"
    """Send the message's type and body on the outbound dialog."""
    SEND_IN = "send_in"
    """Send the message's type and body on the inbound dialog."""
    REDIRECT = "redirect"
    """Answer on the inbound dialog with the target (`REDIRECT_MESSAGE_TYPE`)."""
    END_OUT = "end_out"
    END_IN = "end_in"
    FAIL_OUT = "fail_out"
    """End the outbound dialog with an Error (`code`, `description`)."""
    FAIL_IN = "fail_in"
    """End the inbound dialog with an Error (`code`, `description`)."""
    FORGET = "forget"
    """Remove the mapping."""


@dataclass(frozen=True)
class Step:
    """One step, with what it needs."""

    act: Act
    code: int = 0
    description: str = ""


@dataclass(frozen=True)
class Answer:
    """What the service does with one message: its steps in order, and a line for people."""

    steps: tuple[Step, ...]
    line: str


def answer(
    service: str,
    *,
    inbound: bool,
    message_type: str,
    error: tuple[int, str] | None,
    mapping: Mapping | None,
    mode: Mode,
    target: Classification | None = None,
) -> Answer:
    """What routing service `service` does with a message (see `streaming.ddr`).

    `inbound`: the message came on a dialog an initiator began with the service; else on an
    outbound dialog the service began. `error` is an Error's code and description; `mapping` the
    dialog's mapping, if any; `target` the first message's classification, given only when the
    message needs one.
    """
    end, failed = message_type == END_DIALOG, message_type == ERROR
    if inbound:
        if end or failed:
            if mapping is None:
                return Answer((Step(Act.END_IN),), "the initiator ended an unmapped dialog")
            if end:
                steps = (Step(Act.END_OUT), Step(Act.END_IN), Step(Act.FORGET))
                return Answer(steps, f"the initiator ended the dialog: ended {mapping.service}'s too")
            code, text = wrapped(service, "the initiator", error)
            steps = (Step(Act.FAIL_OUT, code, text), Step(Act.END_IN), Step(Act.FORGET))
            return Answer(steps, f"the initiator's error passed on to {mapping.service}")
        if mapping is not None:
            return Answer((Step(Act.SEND_OUT),), f"forwarded to {mapping.service}")
        if target is None:
            raise ValueError("a first message needs its classification")
        to, reason = target.service, target.error
        if to is None:
            description = f"{service} could not route the conversation: {reason}"[:DESCRIPTION_MAX]
            return Answer((Step(Act.FAIL_IN, CLASSIFY_FAILED, description),), f"not routed: {reason}")
        if mode is Mode.REDIRECT:
            return Answer((Step(Act.REDIRECT), Step(Act.END_IN)), f"redirected to {to}")
        return Answer((Step(Act.BEGIN), Step(Act.SEND_OUT)), f"classified: forwarded to {to}")
    if mapping is None:
        if end or failed:
            return Answer((Step(Act.END_OUT),), "a target ended a dialog no longer mapped")
        return Answer((), f"a {message_type} message on a dialog no longer mapped was left")
    if end:
        steps = (Step(Act.END_IN), Step(Act.END_OUT), Step(Act.FORGET))
        return Answer(steps, f"{mapping.service} ended the dialog: ended the initiator's too")
    if failed:
        code, text = wrapped(service, mapping.service, error)
        steps = (Step(Act.FAIL_IN, code, text), Step(Act.END_OUT), Step(Act.FORGET))
        return Answer(steps, f"{mapping.service}'s error passed on to the initiator")
    return Answer((Step(Act.SEND_IN),), f"{mapping.service}'s answer passed back")


LEFT = "none"
"""What an answer without steps did: the message came on a dialog no longer mapped, and was left."""
CLOSED = "closed"
"""What the answer of a message its other dialog could not carry did: both ended with `DIALOG_CLOSED`."""
ANSWERS = (*(act.value for act in Act if act is not Act.FORGET), LEFT, CLOSED)
"""What a message's answer did, as its metrics name it (`answered_with`): FORGET never comes first."""


def answered_with(reply: Answer) -> str:
    """What an answer did, in one word of `ANSWERS`: its first step's act, or `LEFT` when it has none."""
    return reply.steps[0].act.value if reply.steps else LEFT


def wrapped(service: str, who: str, error: tuple[int, str] | None) -> tuple[int, str]:
    """An Error that wraps the one that arrived: its code when an application's, and its text."""
    code, description = error or (0, "no description")
    own = code if code > 0 else FORWARDED_ERROR
    text = f"{service} passes on the error {who} ended the dialog with: {code}: {description}"
    return own, text[:DESCRIPTION_MAX]


def outbound_id(service: str, database: str, inbound: str) -> str:
    """The id of the dialog a routing service begins for an inbound dialog: the same at every try."""
    return str(uuid.uuid5(_OUTBOUND_IDS, f"{database}/{service}/{inbound}"))


def redirect_body(service: str, broker_instance: str | None) -> bytes:
    """The body of a redirect answer (`REDIRECT_MESSAGE_TYPE`)."""
    broker = (
        "" if broker_instance is None else f"<broker_instance>{escape(broker_instance)}</broker_instance>"
    )
    return f"<redirect><service>{escape(service)}</service>{broker}</redirect>".encode()


def parse_redirect(body: bytes) -> tuple[str, str | None]:
    """The service (and broker instance) a redirect answer names; MalformedRecord when none."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise MalformedRecord(f"a redirect's body is not XML: {exc}") from exc
    service = root.findtext("service")
    if not service:
        raise MalformedRecord(f"a redirect's body names no service: {body[:120]!r}")
    return service, root.findtext("broker_instance") or None
