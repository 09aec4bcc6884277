"""Kyverno's ``x509`` library: ``x509.decode(pem)``, for a Kyverno ValidatingPolicy.

``x509.decode(text)`` reads the first PEM block of the text, as Go's ``pem.Decode`` finds
it, and gives a map of the certificate, with Kyverno's fields and their JSON forms (Go's
``x509.Certificate`` written as JSON and read back, so every number is a double and bytes are
base64): ``Raw``, ``RawTBSCertificate``, ``RawSubjectPublicKeyInfo``, ``RawSubject``,
``RawIssuer``, ``Signature``, ``PublicKeyAlgorithm`` (1: RSA), ``PublicKey`` (``N`` as decimal
text, ``E``), ``SerialNumber`` (Go's int64 of it), ``Issuer`` (Go's ``pkix.Name``: ``Country``
... ``CommonName``, ``Names``, ``ExtraNames``; there is no ``Subject``, as in Kyverno),
``NotBefore`` / ``NotAfter`` (RFC 3339 text), ``KeyUsage`` (Go's bits), ``Extensions``
(``Id``, ``Critical``, ``Value``), ``ExtKeyUsage`` (Go's numbers), ``BasicConstraintsValid``,
``IsCA``, ``MaxPathLen`` (-1 when unlimited), ``MaxPathLenZero``, ``AuthorityKeyId``,
``OCSPServer``, ``IssuingCertificateURL``, ``DNSNames``, ``EmailAddresses``, ``IPAddresses``,
``CRLDistributionPoints``, ``PolicyIdentifiers``, and the name constraints' fields (null when
the certificate has none); what Go leaves unset is null.

Errors, as in Kyverno: no PEM block, a block that is neither ``CERTIFICATE`` nor
``CERTIFICATE REQUEST``, a certificate that does not parse (``cryptography``'s parser, strict
on the DER as Go's is: a certificate one of them refuses gives no value), a negative serial
number (Go refuses it), a key that is not RSA. Not served (an evaluation error, never another
value): a certificate request (Kyverno gives Go's whole ``CertificateRequest``) and a
certificate with name constraints. The raw parts and the extensions' values are the
certificate's own DER bytes. Each call is charged by the text's length (read in Python) and
by the size of the map it gives. It answers only while an imported Kyverno ValidatingPolicy
is run.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import warnings
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtensionOID

from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    Overload,
    charge,
    converted_values,
    loops,
)
from workers.policy_engine.cel.lib.kyverno_resource import (
    CONVERTED_VALUES_PER_STEP,
    require_kyverno_policy,
)

_RSA = "1.2.840.113549.1.1.1"
# Go's ExtKeyUsage numbers, by OID (an OID Go does not know is left out, as Go does)
_EXT_KEY_USAGES = {
    "2.5.29.37.0": 0, "1.3.6.1.5.5.7.3.1": 1, "1.3.6.1.5.5.7.3.2": 2, "1.3.6.1.5.5.7.3.3": 3,
    "1.3.6.1.5.5.7.3.4": 4, "1.3.6.1.5.5.7.3.5": 5, "1.3.6.1.5.5.7.3.6": 6,
    "1.3.6.1.5.5.7.3.7": 7, "1.3.6.1.5.5.7.3.8": 8, "1.3.6.1.5.5.7.3.9": 9,
    "1.3.6.1.4.1.311.10.3.3": 10, "2.16.840.1.113730.4.1": 11, "1.3.6.1.4.1.311.2.1.22": 12,
    "1.3.6.1.4.1.311.61.1.1": 13,
}  # fmt: skip
# pkix.Name's fields, by the last arc of their OID (2.5.4.N)
_NAME_LISTS = {6: "Country", 7: "Locality", 8: "Province", 9: "StreetAddress",
               10: "Organization", 11: "OrganizationalUnit", 17: "PostalCode"}  # fmt: skip
_NAME_TEXTS = {3: "CommonName", 5: "SerialNumber"}
_ACCESS_FIELDS = {AuthorityInformationAccessOID.OCSP: "OCSPServer",
                  AuthorityInformationAccessOID.CA_ISSUERS: "IssuingCertificateURL"}  # fmt: skip


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _line(data: str) -> tuple[str, str]:
    """Go's ``getLine``: the line without its end (and trailing blanks), and the rest."""
    end = data.find("\n")
    line, rest = (data, "") if end < 0 else (data[:end], data[end + 1 :])
    return line.rstrip(" \t\r"), rest


def pem_block(text: str) -> tuple[str, bytes] | None:
    """The first PEM block Go's ``pem.Decode`` finds: its type and bytes (None for none)."""
    rest = text
    while True:
        if rest.startswith("-----BEGIN "):
            rest = rest[len("-----BEGIN ") :]
        else:
            at = rest.find("\n-----BEGIN ")
            if at < 0:
                return None
            rest = rest[at + len("\n-----BEGIN ") :]
        type_line, rest = _line(rest)
        if not type_line.endswith("-----"):
            continue
        kind = type_line[: -len("-----")]
        headers = False
        while True:
            if not rest:
                return None
            line, following = _line(rest)
            if ":" not in line:
                break
            headers, rest = True, following
        if not headers and rest.startswith("-----END "):
            end, trailer = 0, len("-----END ")
        else:
            end = rest.find("\n-----END ")
            trailer = end + len("\n-----END ")
        if end < 0:
            continue
        closing = rest[trailer:]
        wanted = f"{kind}-----"
        if not closing.startswith(wanted) or _line(closing[len(wanted) :])[0]:
            continue
        body = "".join(rest[:end].split())
        try:
            return kind, base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            continue


def _tlv(data: bytes, at: int) -> tuple[int, int, int]:
    """A DER element at ``at``: its tag byte, where its content starts and where it ends."""
    tag, length = data[at], data[at + 1]
    start = at + 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[start : start + count], "big")
        start += count
    return tag, start, start + length


def _tbs_parts(tbs: bytes) -> dict[str, Any]:
    """The raw issuer, subject and subject public key info of a TBSCertificate, the OID of
    its key's algorithm and its extensions' raw values in order (the DER was checked by the
    certificate's parser)."""
    _, at, end = _tlv(tbs, 0)
    elements = []
    while at < end:
        tag, start, stop = _tlv(tbs, at)
        elements.append((tag, at, start, stop))
        at = stop
    if elements[0][0] != 0xA0:  # no explicit version: v1
        elements.insert(0, (0xA0, 0, 0, 0))
    issuer, subject, spki = elements[3], elements[5], elements[6]
    _, algorithm_start, _ = _tlv(tbs, spki[2])  # AlgorithmIdentifier, first in the SPKI
    _, oid_start, oid_end = _tlv(tbs, algorithm_start)
    extensions: list[tuple[str, bool, bytes]] = []
    for tag, _, start, _ in elements[7:]:
        if tag != 0xA3:
            continue
        _, at, end = _tlv(tbs, start)
        while at < end:
            _, field, stop = _tlv(tbs, at)
            _, oid_at, oid_stop = _tlv(tbs, field)
            critical, at_value = False, oid_stop
            if tbs[at_value] == 0x01:  # BOOLEAN critical
                critical = tbs[at_value + 2] != 0
                at_value += 3
            _, value_start, value_end = _tlv(tbs, at_value)
            extensions.append((_oid_text(tbs[oid_at:oid_stop]), critical,
                               tbs[value_start:value_end]))  # fmt: skip
            at = stop
    return {
        "issuer": tbs[issuer[1] : issuer[3]],
        "subject": tbs[subject[1] : subject[3]],
        "spki": tbs[spki[1] : spki[3]],
        "algorithm": _oid_text(tbs[oid_start:oid_end]),
        "extensions": extensions,
    }


def _oid_text(content: bytes) -> str:
    arcs, value = [], 0
    for byte in content:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in (first, arcs[0] - 40 * first, *arcs[1:]))


def _arcs(oid: x509.ObjectIdentifier) -> list[int]:
    return [int(arc) for arc in oid.dotted_string.split(".")]


def _name(name: x509.Name) -> dict[str, Any]:
    """Go's ``pkix.Name`` filled from the RDN sequence, as JSON."""
    out: dict[str, Any] = {field: None for field in _NAME_LISTS.values()}
    out.update({"SerialNumber": "", "CommonName": "", "Names": [], "ExtraNames": None})
    for rdn in name.rdns:
        for attribute in rdn:
            value = attribute.value
            if not isinstance(value, str):
                raise CelLibraryError("x509.decode: an attribute of a name is not a string")
            arcs = _arcs(attribute.oid)
            out["Names"].append({"Type": arcs, "Value": value})
            if len(arcs) == 4 and arcs[:3] == [2, 5, 4]:
                if arcs[3] in _NAME_TEXTS:
                    out[_NAME_TEXTS[arcs[3]]] = value
                elif arcs[3] in _NAME_LISTS:
                    field = _NAME_LISTS[arcs[3]]
                    out[field] = [*(out[field] or []), value]
    out["Names"] = out["Names"] or None
    return out


def _go_int64(number: int) -> int:
    """Go's ``big.Int.Int64``: the low 64 bits of the magnitude, signed, then the sign."""
    low = abs(number) & ((1 << 64) - 1)
    value = low - (1 << 64) if low >= 1 << 63 else low
    return -value if number < 0 else value


def _key_usage(value: bytes) -> int:
    """Go's KeyUsage: bit i of the BIT STRING (0: digitalSignature) as 1 << i."""
    _, start, end = _tlv(value, 0)
    unused, bits = value[start], value[start + 1 : end]
    usage = 0
    for index in range(min(9, len(bits) * 8 - unused)):
        if bits[index // 8] >> (7 - index % 8) & 1:
            usage |= 1 << index
    return usage


def _ip_text(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)  # Go writes an IPv4 address in IPv6 form dotted
    return str(address)


def _extension_fields(cert: x509.Certificate, raw: dict[str, bytes], out: dict[str, Any]) -> None:
    """Fill the fields Go's parser takes from the extensions (``raw``: their values' DER)."""
    for extension in cert.extensions:
        oid, value = extension.oid, extension.value
        if oid == ExtensionOID.NAME_CONSTRAINTS:
            raise CelLibraryError("x509.decode: a certificate with name constraints is not served")
        if oid == ExtensionOID.KEY_USAGE:
            out["KeyUsage"] = _key_usage(raw[oid.dotted_string])
        elif oid == ExtensionOID.BASIC_CONSTRAINTS:
            path = -1 if value.path_length is None else value.path_length
            out.update(BasicConstraintsValid=True, IsCA=value.ca, MaxPathLen=path)
            out["MaxPathLenZero"] = path == 0
        elif oid == ExtensionOID.EXTENDED_KEY_USAGE:
            known = [_EXT_KEY_USAGES[u.dotted_string] for u in value
                     if u.dotted_string in _EXT_KEY_USAGES]  # fmt: skip
            out["ExtKeyUsage"] = known or None
        elif oid == ExtensionOID.AUTHORITY_KEY_IDENTIFIER:
            out["AuthorityKeyId"] = _b64(value.key_identifier)
        elif oid == ExtensionOID.AUTHORITY_INFORMATION_ACCESS:
            for access in value:
                if not isinstance(access.access_location, x509.UniformResourceIdentifier):
                    continue
                if access.access_method in _ACCESS_FIELDS:
                    name = _ACCESS_FIELDS[access.access_method]
                    out[name] = [*(out[name] or []), access.access_location.value]
        elif oid == ExtensionOID.SUBJECT_ALTERNATIVE_NAME:
            dns = value.get_values_for_type(x509.DNSName)
            emails = value.get_values_for_type(x509.RFC822Name)
            ips = [_ip_text(ip) for ip in value.get_values_for_type(x509.IPAddress)]
            out.update(DNSNames=dns or None, EmailAddresses=emails or None,
                       IPAddresses=ips or None)  # fmt: skip
        elif oid == ExtensionOID.CRL_DISTRIBUTION_POINTS:
            for point in value:
                for name in point.full_name or ():
                    if not isinstance(name, x509.UniformResourceIdentifier):
                        break  # Go stops at the first name that is not a URI
                    out["CRLDistributionPoints"] = [*(out["CRLDistributionPoints"] or []),
                                                    name.value]  # fmt: skip
        elif oid == ExtensionOID.CERTIFICATE_POLICIES:
            out["PolicyIdentifiers"] = [_arcs(p.policy_identifier) for p in value]


def _certificate(der: bytes) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():  # a serial of zero: Go takes it, and so does this
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            cert = x509.load_der_x509_certificate(der)
            serial = cert.serial_number
        list(cert.extensions)  # each parsed: an extension Go refuses is refused here too
        parts = _tbs_parts(cert.tbs_certificate_bytes)
    except (ValueError, IndexError) as error:
        raise CelLibraryError(f"x509.decode: the certificate does not parse ({error})") from None
    if serial < 0:
        raise CelLibraryError("x509.decode: x509: negative serial number")
    if parts["algorithm"] != _RSA:
        raise CelLibraryError("certificate should use rsa algorithm")
    key = cert.public_key()
    if not isinstance(key, rsa.RSAPublicKey):  # an RSASSA-PSS key Go does not read as RSA
        raise CelLibraryError("certificate should use rsa algorithm")
    numbers = key.public_numbers()
    out: dict[str, Any] = {
        "Raw": _b64(der), "RawTBSCertificate": _b64(cert.tbs_certificate_bytes),
        "RawSubjectPublicKeyInfo": _b64(parts["spki"]), "RawSubject": _b64(parts["subject"]),
        "RawIssuer": _b64(parts["issuer"]), "Signature": _b64(cert.signature),
        "PublicKeyAlgorithm": 1, "PublicKey": {"N": str(numbers.n), "E": numbers.e},
        "SerialNumber": _go_int64(serial), "Issuer": _name(cert.issuer),
        "NotBefore": f"{cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}",
        "NotAfter": f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}",
        "KeyUsage": 0,
        "Extensions": [{"Id": [int(arc) for arc in oid.split(".")], "Critical": critical,
                        "Value": _b64(value)} for oid, critical, value in parts["extensions"]]
        or None,
        "ExtraExtensions": None, "ExtKeyUsage": None, "BasicConstraintsValid": False,
        "IsCA": False, "MaxPathLen": 0, "MaxPathLenZero": False, "AuthorityKeyId": None,
        "OCSPServer": None, "IssuingCertificateURL": None, "DNSNames": None,
        "EmailAddresses": None, "IPAddresses": None, "PermittedDNSDomainsCritical": False,
        "PermittedDNSDomains": None, "ExcludedDNSDomains": None, "PermittedIPRanges": None,
        "ExcludedIPRanges": None, "PermittedEmailAddresses": None,
        "ExcludedEmailAddresses": None, "PermittedURIDomains": None,
        "ExcludedURIDomains": None, "CRLDistributionPoints": None, "PolicyIdentifiers": None,
    }  # fmt: skip
    _extension_fields(cert, {oid: value for oid, _, value in parts["extensions"]}, out)
    charge(1 + converted_values(out) // CONVERTED_VALUES_PER_STEP, "x509.decode()")
    return _doubles(out)


def _doubles(value: Any) -> Any:
    """Numbers as the JSON round trip gives them: doubles."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [_doubles(item) for item in value]
    return {key: _doubles(item) for key, item in value.items()}


def decode(text: str) -> Any:
    require_kyverno_policy("x509.decode")
    block = pem_block(text)
    if block is None:
        raise CelLibraryError("failed to decode PEM block")
    kind, der = block
    if kind == "CERTIFICATE":
        return _certificate(der)
    if kind == "CERTIFICATE REQUEST":
        raise CelLibraryError("x509.decode: a certificate request is not served")
    raise CelLibraryError("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST")


OVERLOADS = [
    Overload("x509.decode", "x509_decode_string", ("string",), "dyn", decode, cost=loops),
]
