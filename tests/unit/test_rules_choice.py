"""C0 dedupe, the tiers C1-C4 and the round-robin pick C5."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rules_factories import FAR1, route

from streaming.rules.choice import (
    Choice,
    Rotation,
    choose_route,
    dedupe_candidates,
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
    rotation: Rotation | None = None,
) -> Choice | None:
    return choose_route(candidates, service=service, rotation=rotation or Rotation(), locatable=locatable)


def chosen_addresses(candidates: list[Route], conversations: int) -> list[str]:
    """What `conversations` new conversations choose, one after the other, from `candidates`."""
    rotation = Rotation()
    out = []
    for _ in range(conversations):
        chosen = choose(candidates, rotation=rotation)
        assert chosen is not None
        out.append(chosen.route.address)
    return out


def test_c5_rotation_gives_each_index_in_turn_per_key() -> None:
    rotation = Rotation()
    assert [rotation.take("k", 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert rotation.take("other", 2) == 0
    assert rotation.advanced == {"k": 1, "other": 1}


def test_c5_rotation_runs_on_from_its_counters_and_has_none_for_one_option() -> None:
    rotation = Rotation({"k": 2})
    assert [rotation.take("k", 3) for _ in range(2)] == [2, 0]
    assert rotation.take("only", 1) == 0
    assert "only" not in rotation.advanced
    # A set that shrank since its counter was kept starts within it.
    assert Rotation({"k": 5}).take("k", 3) == 2


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


def test_c0_duplicates_count_once_in_the_rotation() -> None:
    routes = [route("AW", f"A{i}", "tcp://a:4022", "S") for i in range(5)] + [
        route("AW", "B", "tcp://b:4022", "S")
    ]
    counts = Counter(chosen_addresses(routes, 40))
    assert counts == {"tcp://a:4022": 20, "tcp://b:4022": 20}


def test_c5_k_times_n_new_conversations_use_each_candidate_k_times() -> None:
    routes = [route("AW", n, f"tcp://{n}:4022", "S") for n in ("c", "a", "b")]
    picks = chosen_addresses(routes, 3 * 4)
    assert picks[:3] == ["tcp://a:4022", "tcp://b:4022", "tcp://c:4022"]  # identity order
    assert Counter(picks) == {"tcp://a:4022": 4, "tcp://b:4022": 4, "tcp://c:4022": 4}


def test_c5_the_order_of_the_routes_does_not_change_the_turn() -> None:
    routes = [route("AW", "A", "tcp://a:4022", "S"), route("AW", "B", "tcp://b:4022", "S")]
    assert chosen_addresses(routes, 4) == chosen_addresses(list(reversed(routes)), 4)


def test_c5_each_set_of_candidates_has_its_own_rotation() -> None:
    ab = [route("AW", n, f"tcp://{n}:4022", "S") for n in ("a", "b")]
    abc = [*ab, route("AW", "c", "tcp://c:4022", "S")]
    rotation = Rotation()
    picks = [choose(routes, rotation=rotation) for routes in (ab, abc, ab, abc, abc)]
    assert [p.route.address for p in picks if p is not None] == [
        "tcp://a:4022",
        "tcp://a:4022",
        "tcp://b:4022",
        "tcp://b:4022",
        "tcp://c:4022",
    ]


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


def test_k2_remembered_identity_wins_while_it_is_a_candidate_and_does_not_turn_the_rotation() -> None:
    a, b, c = (route("AW", n, f"tcp://{n.lower()}:4022", "S") for n in ("A", "B", "C"))
    rotation = Rotation()
    assert pick_one([a, b, c], rotation, remembered=c.identity).name == "C"
    assert rotation.advanced == {}
    assert pick_one([a, b, c], rotation).name == "A"
    # Its route gone, a conversation picks again, and takes its turn.
    assert pick_one([a, b], rotation, remembered=c.identity).name == "A"
    assert pick_one([a, b], rotation).name == "B"


def test_k2_remembered_identity_only_counts_in_the_best_tier() -> None:
    chosen = choose_route(
        [LOCAL_R, NET_R], service="S", rotation=Rotation(), locatable=always, remembered=NET_R.identity
    )
    assert chosen == Choice(LOCAL_R, "C2")
