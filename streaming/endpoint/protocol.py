"""The dialog protocol's decisions as pure functions: what an endpoint does with what arrives.

No Kafka, no SQLite, no clock reads: `streaming.endpoint.store` keeps the dialogs and calls these,
`streaming.endpoint.endpoint` moves the records. Rule ids and sections are those of docs/rules.md
(§1.8 A, §1.15, §1.16 CL).

**Sequenced and unsequenced (A6).** Every message a service sends on a dialog, EndDialog and an
application's Error included, gets the dialog side's next sequence number, from 0. An
acknowledgement is unsequenced (`UNSEQUENCED`) and never reaches the service (A1).

**Acknowledgements (A1, A4).** The receiving endpoint takes a dialog's messages in sequence order
only: the next expected one is queued for the service; one already taken is a duplicate, acked
again but not queued twice (A4); one further ahead is left unacked, so the sender's retransmission
brings it again in order (the sender resends everything unacked, oldest first). An ack therefore
says "everything up to and including sequence n is in my queue" (`acked_through`), and carries the
acking database's broker instance, which pins the conversation (A2).

**Retransmission (A3).** The sender keeps each message until it is acked and resends it when no
ack came: the first wait is `RETRY_FIRST_S` ("a few seconds"), doubled after each resend, capped at
`RETRY_CAP_S` (Service Broker's "about one minute").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from xml.etree import ElementTree
from xml.sax.saxutils import escape

END_DIALOG = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog"
"""Sequenced; sent after the dialog's earlier messages (CL3)."""
ERROR = "http://schemas.microsoft.com/SQL/ServiceBroker/Error"
"""An application's Error is sequenced (A6); the endpoint's own (time-out) is only queued locally."""
DIALOG_TIMER = "http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer"
"""Never leaves the endpoint: queued for the side that set the timer (§1.15, CL4)."""
ACKNOWLEDGEMENT = "router.v1/Acknowledgement"
"""An unsequenced acknowledgement (A1, A6); routed like any reply, never shown to a service."""
DEFAULT_MESSAGE_TYPE = "DEFAULT"

UNSEQUENCED = -1
"""The sequence number of an acknowledgement."""
ERROR_NAMESPACE = "http://schemas.microsoft.com/SQL/ServiceBroker"
LIFETIME_EXPIRED_CODE = -1
"""The code of the time-out Error an endpoint queues when its dialog's lifetime passes (CL1).
Negative: made by the endpoint, not by an application (application codes are > 0, §1.15)."""
DESCRIPTION_MAX = 3000
"""An Error's description is nvarchar(3000) (§1.17)."""

RETRY_FIRST_S = 4.0
"""A3: the first wait for an ack before a resend ("a few seconds")."""
RETRY_CAP_S = 60.0
"""A3: the longest wait between resends ("about one minute")."""
ENDED_MEMORY_S = 900.0
"""How long an endpoint remembers a dialog that ended, to ack and discard late duplicates of it
instead of taking them for a new dialog (CL3). Then it is forgotten, so the store does not grow."""


def retry_wait_s(resends: int, first_s: float = RETRY_FIRST_S, cap_s: float = RETRY_CAP_S) -> float:
    """A3: how long to wait for an ack after a message was sent `resends` times before."""
    if resends < 0:
        raise ValueError(f"expected a number of resends >= 0, got {resends}")
    return min(cap_s, first_s * 2.0 ** min(resends, 32))


class Arrival(str, Enum):
    """What a receiving endpoint does with a sequenced message of a dialog it holds (A4)."""

    TAKE = "take"
    """The next expected message: queue it for the service and ack it."""
    DUPLICATE = "duplicate"
    """Taken before: ack again, queue nothing (A4)."""
    EARLY = "early"
    """Ahead of a missing one: neither queued nor acked; the sender resends both in order."""
    DISCARD = "discard"
    """The dialog ended here, or failed: ack it (the sender may stop resending), queue nothing (CL3)."""


def arrival(expected: int, sequence: int, *, closed: bool) -> Arrival:
    """Classify a sequenced message whose dialog expects sequence `expected` next (A4, CL3).

    `closed`: this side ended the dialog, the far side ended it, or it failed (an Error or a
    time-out). The expected message of a closed dialog is discarded, but still acked so that the
    sender stops resending it (an EndDialog answering this side's own is one such).
    """
    if sequence < expected:
        return Arrival.DUPLICATE
    if sequence > expected:
        return Arrival.EARLY
    if closed:
        return Arrival.DISCARD
    return Arrival.TAKE


def starts_dialog(sequence: int, from_initiator: bool) -> bool:
    """A message of an unknown dialog opens its target side only if it is the initiator's first (CL2)."""
    return from_initiator and sequence == 0


def ack_body(acked_through: int) -> bytes:
    """The body of an acknowledgement: every sequence number up to `acked_through` is taken."""
    return str(acked_through).encode("ascii")


def acked_through(body: bytes) -> int:
    """Read an acknowledgement's body; raises ValueError when it is not one."""
    text = body.decode("ascii", errors="strict").strip()
    if not text.lstrip("-").isdigit():
        raise ValueError(f"expected an acknowledgement body (a sequence number), got {body[:40]!r}")
    return int(text)


@dataclass(frozen=True)
class ErrorBody:
    """An Error message's content: a code and a description (§1.15)."""

    code: int
    description: str


def error_body(code: int, description: str) -> bytes:
    """The XML body of an Error message (§1.15: root Error, children Code and Description)."""
    text = description[:DESCRIPTION_MAX]
    return (
        f'<Error xmlns="{ERROR_NAMESPACE}"><Code>{int(code)}</Code>'
        f"<Description>{escape(text)}</Description></Error>"
    ).encode()


def parse_error_body(body: bytes) -> ErrorBody:
    """Read an Error message's body; raises ValueError when it is not one."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise ValueError(f"expected an Error body (XML), got {body[:60]!r}: {exc}") from exc
    code = root.findtext(f"{{{ERROR_NAMESPACE}}}Code")
    description = root.findtext(f"{{{ERROR_NAMESPACE}}}Description") or ""
    if code is None or not code.strip().lstrip("-").isdigit():
        raise ValueError(f"expected an Error body with a numeric Code, got {body[:60]!r}")
    return ErrorBody(int(code), description)


def check_application_error(code: int, description: str) -> None:
    """END CONVERSATION WITH ERROR takes a code > 0 and a description (§1.15); else ValueError."""
    if code <= 0:
        raise ValueError(
            f"expected an application error code > 0 (negative codes are the broker's), got {code}"
        )
    if not description:
        raise ValueError("expected an error description, got an empty one")
    if len(description) > DESCRIPTION_MAX:
        raise ValueError(
            f"expected a description of at most {DESCRIPTION_MAX} characters, got {len(description)}"
        )
