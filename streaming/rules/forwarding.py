"""Rules for messages this instance relays for others (docs/rules.md §1.11, C-drop, F1-F5).

F2 and F7 (the msdb decision decides; LOCAL means deliver, anything else means forward) are the
engine's flow; F4 and F6 (no ack, no storage, no decryption) need no decision. What lives here are
the checks a forwarder makes before a message leaves again.
"""

from __future__ import annotations

from streaming.rules.model import Instance, Message, Reason

BYTES_PER_MB = 1_048_576
"""F5 [INF]: MESSAGE_FORWARD_SIZE megabytes are 1,048,576 bytes each."""


def forwarding_refused(message: Message, instance: Instance) -> bool:
    """True when the forwarding gate drops a message whose chosen route is not LOCAL (C-drop, F1, F2).

    Applies to conversations that did not originate here (incoming, or re-routed by S5 loop-back):
    with MESSAGE_FORWARDING disabled (the default, F1) they are dropped rather than relayed.
    The flag is irrelevant for locally originated messages.
    """
    return message.is_remote and not instance.forwarding


def forwarder_discard_reason(message: Message, instance: Instance) -> Reason | None:
    """Return why a forwarder discards `message` instead of relaying it, or None (F3, F5, LP1).

    Checked in this order:
    * F3 hops: a message whose hop budget is already exhausted (`hops_remaining <= 0`) is not
      forwarded ([AMB] faithful reading: discard, since each forward costs one hop).
    * F3 lifetime: a message whose remaining `time_to_live_s` is known and has reached 0 is
      discarded (the DMV's "discarded when it reaches 0"); an unknown lifetime never expires here.
    * F5 buffer: a message larger than MESSAGE_FORWARD_SIZE is dropped, whatever else is in flight
      (`buffer_full` with nothing before it); a record here is one fragment, never reassembled.
    """
    if message.hops_remaining <= 0:
        return Reason.HOPS_EXHAUSTED
    if message.time_to_live_s is not None and message.time_to_live_s <= 0:
        return Reason.LIFETIME_EXPIRED
    if message.size_bytes > instance.forward_size_mb * BYTES_PER_MB:
        return Reason.FORWARD_BUFFER_FULL
    return None


def buffer_full(in_flight: int, message: Message, instance: Instance) -> bool:
    """F5: forwarding `message` would push the bytes in flight over MESSAGE_FORWARD_SIZE.

    What a micro-batch forwards is in flight together, from its decision until its write is done:
    `in_flight` holds the bytes of the batch's messages forwarded before this one (its arrival
    order). The streaming job writes a batch's partitions side by side, each with an equal share
    of the budget (`router.spark.DecisionPass`), so that their sum stays within it.
    """
    return in_flight + message.size_bytes > instance.forward_size_mb * BYTES_PER_MB


def forwarded_hops(message: Message) -> int:
    """Return the hop budget the forwarded copy carries: one less than on arrival (F3)."""
    return message.hops_remaining - 1
