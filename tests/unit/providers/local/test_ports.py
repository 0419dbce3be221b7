"""Free ports (providers/local/ports.py): each candidate really bound, other clusters' ports
skipped, a port in use named in one line."""

from __future__ import annotations

import socket

import pytest

from provisioner.errors import UsageError
from provisioner.providers.local import ports


@pytest.fixture
def listener():
    """A port something listens on (loopback; any address counts as taken)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_a_listening_port_is_not_free(listener):
    assert not ports.is_port_free(listener)


def test_allocation_skips_reserved_ports_and_prefers_one_block(monkeypatch):
    monkeypatch.setattr(ports, "is_port_free", lambda p: True)
    got = ports.allocate_ports(5, seed=1)
    assert got == list(range(got[0], got[0] + 5)) and ports.PORT_RANGE[0] <= got[0] < ports.PORT_RANGE[1]
    again = ports.allocate_ports(5, reserved=got, seed=1)
    assert not set(again) & set(got)


def test_a_fragmented_range_is_gathered_port_by_port(monkeypatch):
    monkeypatch.setattr(ports, "PORT_RANGE", (30000, 30020))
    monkeypatch.setattr(ports, "is_port_free", lambda p: p % 2 == 0)  # no two neighbours free
    assert ports.allocate_ports(3, seed=0) == [30000, 30002, 30004]
    with pytest.raises(UsageError, match="could not find 11 free TCP ports in 30000-30020"):
        ports.allocate_ports(11, seed=0)


def test_an_explicit_port_in_use_is_named(listener):
    with pytest.raises(UsageError, match=f"port {listener} is already in use") as exc:
        ports.check_ports_free([listener])
    assert exc.value.exit_code == 2 and "port-already-in-use" in exc.value.one_line()
