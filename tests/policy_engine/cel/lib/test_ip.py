"""Kubernetes' IP and CIDR libraries (1.30+), against their documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

TRUE = [
    # ip
    "ip('127.0.0.1').family() == 4 && ip('::1').family() == 6",
    "isIP('127.0.0.1') && isIP('::1') && !isIP('127.0.0.256') && !isIP(':::1')",
    "!isIP('::ffff:1.2.3.4') && !isIP('fe80::1%eth0') && !isIP('127.0.0.01')",
    "ip.isCanonical('127.0.0.1') && ip.isCanonical('2001:db8::abcd')",
    "!ip.isCanonical('2001:DB8::ABCD') && !ip.isCanonical('2001:db8::0:0:0:abcd')",
    "ip('0.0.0.0').isUnspecified() && !ip('127.0.0.1').isUnspecified()",
    "ip('::').isUnspecified() && !ip('::1').isUnspecified()",
    "ip('127.0.0.1').isLoopback() && !ip('192.168.0.1').isLoopback()",
    "ip('::1').isLoopback() && !ip('2001:db8::abcd').isLoopback()",
    "ip('224.0.0.1').isLinkLocalMulticast() && !ip('224.0.1.1').isLinkLocalMulticast()",
    "ip('ff02::1').isLinkLocalMulticast() && !ip('fd00::1').isLinkLocalMulticast()",
    "ip('169.254.169.254').isLinkLocalUnicast() && !ip('192.168.0.1').isLinkLocalUnicast()",
    "ip('fe80::1').isLinkLocalUnicast() && !ip('fd80::1').isLinkLocalUnicast()",
    "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
    "ip('2001:db8::abcd').isGlobalUnicast() && !ip('ff00::1').isGlobalUnicast()",
    "string(ip('2001:db8::abcd')) == '2001:db8::abcd'",
    # cidr
    "isCIDR('192.168.0.0/16') && isCIDR('::1/128')",
    "!isCIDR('192.168.0.0/33') && !isCIDR('::1/129') && !isCIDR('::ffff:1.2.3.4/24')",
    "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1')) && "
    "!cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))",
    "cidr('192.168.0.0/24').containsIP('192.168.0.1') && "
    "!cidr('192.168.0.0/24').containsIP('192.168.1.1')",
    "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24')) && "
    "!cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))",
    "cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24') && "
    "!cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')",
    "cidr('192.168.0.1/24').ip() == ip('192.168.0.1') && cidr('192.168.0.1/24').ip().family() == 4",
    "cidr('::1/128').ip() == ip('::1') && cidr('::1/128').ip().family() == 6",
    "cidr('192.168.0.0/24').masked() == cidr('192.168.0.0/24')",
    "cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
    "cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()",
    "cidr('2001:db8:1::/32').masked() == cidr('2001:db8::/32')",
    "cidr('192.168.0.0/16').prefixLength() == 16 && cidr('::1/128').prefixLength() == 128",
    "string(cidr('192.168.0.0/24')) == '192.168.0.0/24'",
]
ERRORS = [
    ("ip('127.0.0.256')", "parse error"),
    ("ip(':::1')", "parse error"),
    ("ip('::ffff:1.2.3.4')", "IPv4-mapped"),  # IPv4-mapped IPv6 addresses are refused
    ("ip('fe80::1%eth0')", "zone"),
    ("cidr('192.168.0.0/33')", "parse error"),
    ("cidr('::1/129')", "parse error"),
    ("cidr('::ffff:1.2.3.4/24')", "IPv4-mapped"),
    ("cidr('192.168.0.0/')", "parse error"),
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, match=reason)


def test_a_cidr_with_host_bits_keeps_them_until_masked() -> None:
    # The library's reference says cidr('192.168.0.1/16') is an error, yet its own examples
    # (and its parser) take it: the address keeps its host bits until masked().
    holds("cidr('192.168.0.1/24') != cidr('192.168.0.1/24').masked()")
    assert value("string(cidr('192.168.0.1/24'))") == "192.168.0.1/24"
