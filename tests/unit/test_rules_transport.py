"""T1, T4: the next hop a TRANSPORT route derives from a service name."""

from __future__ import annotations

import pytest

from streaming.rules.transport import transport_address


@pytest.mark.parametrize(
    ("service", "address"),
    [
        ("tcp://orders.contoso.com:4022/Orders", "tcp://orders.contoso.com:4022"),
        ("TCP://Orders:4022", "TCP://Orders:4022"),
        ("Tcp://10.0.0.7:1234/a/b", "Tcp://10.0.0.7:1234"),
        ("tcp://h:4022/", "tcp://h:4022"),
    ],
)
def test_t1_service_names_that_begin_with_an_address(service: str, address: str) -> None:
    assert transport_address(service) == address


@pytest.mark.parametrize(
    "service",
    [
        "Orders",
        "tcp://host/Orders",
        "tcp://host:/x",
        "tcp://h:4022x/Orders",
        "xtcp://h:4022/S",
        " tcp://h:4022",
        "http://h:80/S",
    ],
)
def test_t4_other_service_names_are_not_routable(service: str) -> None:
    assert transport_address(service) is None
