"""The policy's network rule on its own: what counts as private, allowed or the daemon."""

from __future__ import annotations

import ipaddress

import pytest

from signoff.runtime.policy.net import NetAllow, NetKind, NetRule, is_private


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "::1", "10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.169.254",
    "fe80::1", "fd12:3456::1", "0.0.0.0", "::", "100.64.0.1", "::ffff:127.0.0.1",
    "::ffff:10.0.0.1"])
def test_loopback_link_local_private_and_unique_local_addresses_are_private(
        address: str) -> None:
    """The cloud metadata address, RFC 1918, ULA, CGNAT and mapped IPv4 all count."""
    assert is_private(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.215.14", "1.1.1.1", "2606:4700::1111"])
def test_public_addresses_are_not_private(address: str) -> None:
    """Ordinary internet addresses stay public."""
    assert not is_private(ipaddress.ip_address(address))


def test_net_allow_takes_hosts_suffixes_and_cidrs() -> None:
    """Hosts match exactly, *.suffix matches subdomains, a CIDR must hold every address."""
    allow = NetAllow.parse(["grafana.lan", "*.corp.example", "10.0.0.0/8", "fd00::/8"])
    assert allow.covers("Grafana.LAN.", ("192.168.1.9",))
    assert allow.covers("ci.corp.example", ("172.16.0.1",))
    assert not allow.covers("corp.example", ("172.16.0.1",))
    assert not allow.covers("evilcorp.example", ("172.16.0.1",))
    assert allow.covers("db.internal", ("10.1.2.3",))
    assert not allow.covers("db.internal", ("10.1.2.3", "192.168.0.1"))
    assert not allow.covers("nowhere.test", ())


@pytest.mark.parametrize("entry", ["http://x/", "*.", "a b", "10.0.0.0/33", ""])
def test_a_bad_net_allow_entry_names_itself(entry: str) -> None:
    """An entry that is no host, suffix, address or CIDR is a ValueError naming it."""
    with pytest.raises(ValueError, match="is not a host name"):
        NetAllow.parse([entry])


async def test_the_daemons_own_port_on_loopback_beats_the_allow_list() -> None:
    """127.0.0.1:<daemon port> is the daemon even when 127.0.0.0/8 is allowed."""
    rule = NetRule(allow=NetAllow.parse(["127.0.0.0/8"]), own_ports=frozenset({8080}))
    assert (await rule.destination("http://127.0.0.1:8080/tasks")).kind is NetKind.OWN
    assert (await rule.destination("http://[::1]:8080/")).kind is NetKind.OWN
    assert (await rule.destination("http://127.0.0.1:9000/")).kind is NetKind.ALLOWED
    assert (await rule.destination("http://10.0.0.1:8080/")).kind is NetKind.PRIVATE


@pytest.mark.parametrize("host", ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::ffff:0.0.0.0]"])
async def test_the_daemons_own_port_written_as_ipv6_is_still_the_daemon(host: str) -> None:
    """An IPv4 address written as IPv6 reaches the daemon's IPv4 listener: it is blocked
    as the daemon's own address, not merely asked about as a private one."""
    rule = NetRule(own_ports=frozenset({8080}))
    assert (await rule.destination(f"http://{host}:8080/tasks")).kind is NetKind.OWN
