"""Kubernetes' IP and CIDR libraries (1.30+).

``ip(s)``, ``isIP(s)``, ``ip.isCanonical(s)``; on an IP ``family()`` (4 or 6),
``isUnspecified()``, ``isLoopback()``, ``isLinkLocalMulticast()``, ``isLinkLocalUnicast()``,
``isGlobalUnicast()``. ``cidr(s)``, ``isCIDR(s)``; on a CIDR ``containsIP(ip or string)``,
``containsCIDR(cidr or string)``, ``ip()``, ``masked()``, ``prefixLength()``; ``string(ip)``
and ``string(cidr)``. As in the API server, IPv4-mapped IPv6 addresses and zones are
refused, and a CIDR may have bits set after its prefix (``cidr('192.168.0.1/24')``: its
``ip()`` is that address, ``masked()`` clears them).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from workers.policy_engine.cel.lib.base import CelLibraryError, Overload, opaque, unwrap

IP, CIDR = "ip", "cidr"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> Address:
    if "%" in text:
        raise CelLibraryError(f"IP address with zone value is not allowed: {text!r}")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise CelLibraryError(
            f"IP Address {text!r} parse error during conversion from string"
        ) from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise CelLibraryError(f"IPv4-mapped IPv6 address is not allowed: {text!r}")
    return address


def _network(text: str) -> tuple[Address, Network]:
    address_text, slash, prefix = text.partition("/")
    if not slash or not prefix.isdigit():
        raise CelLibraryError(f"network address {text!r} parse error during conversion from string")
    address = _address(address_text)
    try:
        network = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    except ValueError:
        raise CelLibraryError(
            f"network address {text!r} parse error during conversion from string"
        ) from None
    return address, network


def _ip_value(address: Address) -> dict[str, Any]:
    return opaque(IP, address=str(address))


def _cidr_value(address: Address, network: Network) -> dict[str, Any]:
    return opaque(CIDR, address=str(address), prefix=network.prefixlen)


def to_ip(text: str) -> dict[str, Any]:
    return _ip_value(_address(text))


def is_ip(text: str) -> bool:
    try:
        _address(text)
    except CelLibraryError:
        return False
    return True


def is_canonical(text: str) -> bool:
    return str(_address(text)) == text


def _ip_of(value: Any) -> Address:
    return ipaddress.ip_address(str(unwrap(value, IP)["address"]))


def family(value: Any) -> int:
    return _ip_of(value).version


def is_unspecified(value: Any) -> bool:
    return _ip_of(value).is_unspecified


def is_loopback(value: Any) -> bool:
    return _ip_of(value).is_loopback


def is_link_local_multicast(value: Any) -> bool:
    """224.0.0.0/24, or an IPv6 multicast address of link-local scope (ffX2::, any flags)."""
    address = _ip_of(value)
    if address.version == 4:
        return address in ipaddress.ip_network("224.0.0.0/24")
    return (int(address) >> 112) & 0xFF0F == 0xFF02


def is_link_local_unicast(value: Any) -> bool:
    address = _ip_of(value)
    if address.version == 4:
        return address in ipaddress.ip_network("169.254.0.0/16")
    return address in ipaddress.ip_network("fe80::/10")


def is_global_unicast(value: Any) -> bool:
    address = _ip_of(value)
    if address.is_unspecified or address.is_loopback or address.is_multicast:
        return False
    if is_link_local_unicast(value):
        return False
    return not (address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255"))


def to_cidr(text: str) -> dict[str, Any]:
    return _cidr_value(*_network(text))


def is_cidr(text: str) -> bool:
    try:
        _network(text)
    except CelLibraryError:
        return False
    return True


def _cidr_of(value: Any) -> tuple[Address, Network]:
    fields = unwrap(value, CIDR)
    return _network(f"{fields['address']}/{fields['prefix']}")


def contains_ip(value: Any, other: Any) -> bool:
    _, network = _cidr_of(value)
    address = _address(other) if isinstance(other, str) else _ip_of(other)
    return address.version == network.version and address in network


def contains_cidr(value: Any, other: Any) -> bool:
    _, network = _cidr_of(value)
    _, inner = _network(other) if isinstance(other, str) else _cidr_of(other)
    if inner.version != network.version:
        return False
    return inner.prefixlen >= network.prefixlen and inner.network_address in network


def cidr_ip(value: Any) -> dict[str, Any]:
    return _ip_value(_cidr_of(value)[0])


def masked(value: Any) -> dict[str, Any]:
    _, network = _cidr_of(value)
    return _cidr_value(network.network_address, network)


def prefix_length(value: Any) -> int:
    return _cidr_of(value)[1].prefixlen


def ip_to_string(value: Any) -> str:
    return str(_ip_of(value))


def cidr_to_string(value: Any) -> str:
    """The address as written (not masked) and the prefix length."""
    fields = unwrap(value, CIDR)
    return f"{fields['address']}/{fields['prefix']}"


OVERLOADS = [
    Overload("ip", "string_to_ip", ("string",), IP, to_ip),
    Overload("ip", "cidr_ip", (CIDR,), IP, cidr_ip, True),
    Overload("isIP", "is_ip", ("string",), "bool", is_ip),
    Overload("ip.isCanonical", "ip_is_canonical", ("string",), "bool", is_canonical),
    Overload("family", "ip_family", (IP,), "int", family, True),
    Overload("isUnspecified", "ip_is_unspecified", (IP,), "bool", is_unspecified, True),
    Overload("isLoopback", "ip_is_loopback", (IP,), "bool", is_loopback, True),
    Overload("isLinkLocalMulticast", "ip_is_link_local_multicast", (IP,), "bool",
             is_link_local_multicast, True),
    Overload("isLinkLocalUnicast", "ip_is_link_local_unicast", (IP,), "bool",
             is_link_local_unicast, True),
    Overload("isGlobalUnicast", "ip_is_global_unicast", (IP,), "bool", is_global_unicast, True),
    Overload("cidr", "string_to_cidr", ("string",), CIDR, to_cidr),
    Overload("isCIDR", "is_cidr", ("string",), "bool", is_cidr),
    Overload("containsIP", "cidr_contains_ip_string", (CIDR, "string"), "bool", contains_ip, True),
    Overload("containsIP", "cidr_contains_ip_ip", (CIDR, IP), "bool", contains_ip, True),
    Overload("containsCIDR", "cidr_contains_cidr_string", (CIDR, "string"), "bool",
             contains_cidr, True),
    Overload("containsCIDR", "cidr_contains_cidr", (CIDR, CIDR), "bool", contains_cidr, True),
    Overload("masked", "cidr_masked", (CIDR,), CIDR, masked, True),
    Overload("prefixLength", "cidr_prefix_length", (CIDR,), "int", prefix_length, True),
    Overload("string", "ip_to_string", (IP,), "string", ip_to_string),
    Overload("string", "cidr_to_string", (CIDR,), "string", cidr_to_string),
]  # fmt: skip
