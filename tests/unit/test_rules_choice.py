"""C0 dedupe, the tiers C1-C4 and the deterministic pick C5."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from rules_factories import FAR1, route

from streaming.rules.choice import (
    Choice,
    choose_route,
    dedupe_candidates,
    deterministic_index,
    local_tier,
    mirror_tier,
    network_tier,
    pick_one,
    transport_tier,
)
from streaming.rules.model import Route

LOCAL_R = route("AW", "Local", "LOCAL", "S")
NET_R = route("AW", "Net", "tcp://n:4022", "S")
MIRROR_R = route("AW", "Mirror", "tcp://p1:4022", "S", mirror="tcp://p2:4022")
TRANSPORT_R = route("AW", "Transport", "TRANSPORT")


def always(_: Route) -> bool:
    return True


def never(_: Route) -> bool:
    return False


def choose(
    candidates: list[Route],
    service: str = "S",
    locatable: Callable[[Route], bool] = always,
    conversation: str = "c1",
) -> Choice | None:
    return choose_route(candidates, service=service, conversation_id=conversation, locatable=locatable)


def chosen_address(candidates: list[Route], conversation: str) -> str:
    chosen = choose(candidates, conversation=conversation)
    assert chosen is not None
    return chosen.route.address


def test_c5_index_is_crc32_of_the_conversation_modulo_count() -> None:
    for conversation in ("c1", "c2", "conversation-ü"):
        assert deterministic_index(conversation, 3) == zlib.crc32(conversation.encode("utf-8")) % 3
    assert deterministic_index("anything", 1) == 0


def test_c0_dedupe_on_identity_keeps_smallest_name_sorted_by_identity() -> None:
    b = route("AW", "Zed", "tcp://b:4022", "S")
    a_dup1 = route("AW", "Second", "tcp://a:4022", "S", mirror="tcp://m:4022")
    a_dup2 = route("AW", "First", "tcp://a:4022", "S")
    unique = dedupe_candidates([b, a_dup1, a_dup2])
    assert [r.name for r in unique] == ["First", "Zed"]


def test_c0_identity_compares_stored_addresses_exactly() -> None:
    plain = route("AW", "Plain", "tcp://a:4022", "S")
    slash = route("AW", "Slash", "tcp://a:4022/", "S")
    assert len(dedupe_candidates([plain, slash])) == 2


def test_c0_duplicates_do_not_bias_the_pick() -> None:
    routes = [route("AW", f"A{i}", "tcp://a:4022", "S") for i in range(5)] + [
        route("AW", "B", "tcp://b:4022", "S")
    ]
    picks = {chosen_address(routes, f"c{i}") for i in range(40)}
    assert picks == {"tcp://a:4022", "tcp://b:4022"}
    counts = [chosen_address(routes, f"c{i}") for i in range(400)]
    assert 120 < counts.count("tcp://b:4022") < 280


def test_c5_pick_one_indexes_into_the_sorted_candidates() -> None:
    candidates = dedupe_candidates([route("AW", n, f"tcp://{n}:4022", "S") for n in ("c", "a", "b")])
    for conversation in ("c1", "c2", "c3", "c4"):
        expected = ["tcp://a:4022", "tcp://b:4022", "tcp://c:4022"][deterministic_index(conversation, 3)]
        assert pick_one(candidates, conversation).address == expected


def test_c5_same_conversation_same_choice() -> None:
    routes = [route("AW", "A", "tcp://a:4022", "S"), route("AW", "B", "tcp://b:4022", "S")]
    first = choose(routes, conversation="conv-42")
    assert all(choose(list(reversed(routes)), conversation="conv-42") == first for _ in range(3))


def test_tiers_sort_routes_by_kind() -> None:
    everything = [LOCAL_R, NET_R, MIRROR_R, TRANSPORT_R]
    assert mirror_tier(everything) == [MIRROR_R]
    assert local_tier(everything, always) == [LOCAL_R]
    assert local_tier(everything, never) == []
    assert network_tier(everything) == [NET_R]
    assert transport_tier(everything, "tcp://h:4022/S") == [TRANSPORT_R]
    assert transport_tier(everything, "S") == []


def test_c1_mirror_first() -> None:
    chosen = choose([LOCAL_R, NET_R, MIRROR_R, TRANSPORT_R])
    assert chosen is not None and (chosen.route.name, chosen.step) == ("Mirror", "C1")


def test_c2_local_before_network() -> None:
    chosen = choose([NET_R, LOCAL_R, TRANSPORT_R])
    assert chosen is not None and (chosen.route.name, chosen.step) == ("Local", "C2")


def test_c2_skipped_when_not_locatable() -> None:
    chosen = choose([NET_R, LOCAL_R], locatable=never)
    assert chosen is not None and (chosen.route.name, chosen.step) == ("Net", "C3")


def test_c2_asks_locatable_per_route() -> None:
    other_db = route("AW", "OtherDb", "LOCAL", "S", FAR1)
    chosen = choose([LOCAL_R, other_db], locatable=lambda r: r.broker_instance is not None)
    assert chosen is not None and chosen.route.name == "OtherDb"


def test_c4_transport_last_and_only_when_usable() -> None:
    chosen = choose([TRANSPORT_R], service="tcp://h:4022/S")
    assert chosen is not None and (chosen.route.name, chosen.step) == ("Transport", "C4")
    assert choose([TRANSPORT_R], service="S") is None


def test_no_usable_route() -> None:
    assert choose([LOCAL_R], locatable=never) is None
    assert choose([]) is None


def test_k2_remembered_identity_wins_while_it_is_a_candidate() -> None:
    a, b, c = (route("AW", n, f"tcp://{n.lower()}:4022", "S") for n in ("A", "B", "C"))
    conversation = next(f"c{i}" for i in range(100) if deterministic_index(f"c{i}", 3) == 0)
    assert pick_one([a, b, c], conversation).name == "A"
    assert pick_one([a, b, c], conversation, remembered=c.identity).name == "C"
    assert pick_one([a, b], conversation, remembered=c.identity) == pick_one([a, b], conversation)


def test_k2_remembered_identity_only_counts_in_the_best_tier() -> None:
    chosen = choose_route(
        [LOCAL_R, NET_R], service="S", conversation_id="c1", locatable=always, remembered=NET_R.identity
    )
    assert chosen == Choice(LOCAL_R, "C2")
