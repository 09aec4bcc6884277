"""Kyverno's x509 library (``x509.decode(pem)``): a certificate as Kyverno's map of Go's
``x509.Certificate`` fields (numbers as doubles, bytes as base64, unset fields null), over
certificates built here; Go's PEM reading; Kyverno's errors; only inside a Kyverno
ValidatingPolicy."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, NameOID

from tests.policy_engine.cel.lib.kyverno_support import in_kyverno_policy, kyverno_fails
from tests.policy_engine.cel.lib.support import fails, value
from workers.policy_engine.cel.programs import CelError, Expression, StepMeter

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=1024)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
START = datetime.datetime(2025, 3, 1, 8, 30, tzinfo=datetime.UTC)
ISSUER = x509.Name([
    x509.NameAttribute(NameOID.COUNTRY_NAME, "NL"),
    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Assay Test"),
    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Policies"),
    x509.NameAttribute(NameOID.SERIAL_NUMBER, "42"),
    x509.NameAttribute(NameOID.COMMON_NAME, "assay test root"),
])  # fmt: skip


def certificate(key: Any = RSA_KEY, serial: int = 7, *extensions: Any) -> str:
    """A PEM certificate of ``key``, signed by it, with ``(extension, critical)`` pairs."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "web.shop.svc")]))
        .issuer_name(ISSUER)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(START)
        .not_valid_after(START + datetime.timedelta(days=90))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    signed = builder.sign(key, hashes.SHA256())
    return signed.public_bytes(serialization.Encoding.PEM).decode()


def with_serial(pem: str, byte: int) -> str:
    """``pem`` (serial 7) with its serial's one byte replaced: a serial the builder refuses
    (zero, negative); neither Go nor this library checks the signature to decode."""
    der = x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)
    at = der.index(b"\x02\x01\x07")  # the first INTEGER of one byte after the version
    patched = der[:at] + bytes([2, 1, byte]) + der[at + 3 :]
    body = base64.encodebytes(patched).decode()
    return f"-----BEGIN CERTIFICATE-----\n{body}-----END CERTIFICATE-----\n"


FULL = certificate(
    RSA_KEY,
    (1 << 64) + (1 << 63) + 5,  # past int64: Go's Int64 keeps the low 64 bits, signed
    (x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                   data_encipherment=False, key_agreement=False, key_cert_sign=False,
                   crl_sign=False, encipher_only=False, decipher_only=False), True),
    (x509.BasicConstraints(ca=True, path_length=0), True),
    (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH,
                            x509.ObjectIdentifier("1.2.3.4")]), False),
    (x509.SubjectAlternativeName([
        x509.DNSName("web.shop.svc"), x509.DNSName("web"), x509.RFC822Name("ops@shop.example"),
        x509.IPAddress(ipaddress.ip_address("10.0.0.7")),
        x509.IPAddress(ipaddress.ip_address("fd00::7")),
        x509.IPAddress(ipaddress.ip_address("::ffff:10.1.2.3")),
    ]), False),
    (x509.AuthorityKeyIdentifier(b"\x01\x02\x03", None, None), False),
    (x509.AuthorityInformationAccess([
        x509.AccessDescription(AuthorityInformationAccessOID.OCSP,
                               x509.UniformResourceIdentifier("http://ocsp.shop.example")),
        x509.AccessDescription(AuthorityInformationAccessOID.CA_ISSUERS,
                               x509.UniformResourceIdentifier("http://ca.shop.example/ca.crt")),
    ]), False),
    (x509.CRLDistributionPoints([x509.DistributionPoint(
        [x509.UniformResourceIdentifier("http://ca.shop.example/crl")], None, None, None)]),
     False),
    (x509.CertificatePolicies([x509.PolicyInformation(x509.ObjectIdentifier("2.23.140.1.2.1"),
                                                      None)]), False),
)  # fmt: skip


def decoded(pem: str) -> Any:
    with in_kyverno_policy():
        return value("x509.decode(object.pem)", {"object": {"pem": pem}})


def test_a_certificate_gives_go_s_fields() -> None:
    got = decoded(FULL)
    numbers = RSA_KEY.public_key().public_numbers()
    assert got["PublicKeyAlgorithm"] == 1.0
    assert got["PublicKey"] == {"N": str(numbers.n), "E": 65537.0}
    assert got["SerialNumber"] == float(-(1 << 63) + 5)
    assert (got["NotBefore"], got["NotAfter"]) == ("2025-03-01T08:30:00Z", "2025-05-30T08:30:00Z")
    assert got["KeyUsage"] == 5.0  # digitalSignature (1) and keyEncipherment (4)
    assert (got["BasicConstraintsValid"], got["IsCA"]) == (True, True)
    assert (got["MaxPathLen"], got["MaxPathLenZero"]) == (0.0, True)
    assert got["ExtKeyUsage"] == [1.0, 2.0]  # an OID Go does not know is left out
    assert got["DNSNames"] == ["web.shop.svc", "web"]
    assert got["EmailAddresses"] == ["ops@shop.example"]
    assert got["IPAddresses"] == ["10.0.0.7", "fd00::7", "10.1.2.3"]
    assert got["AuthorityKeyId"] == "AQID"
    assert got["OCSPServer"] == ["http://ocsp.shop.example"]
    assert got["IssuingCertificateURL"] == ["http://ca.shop.example/ca.crt"]
    assert got["CRLDistributionPoints"] == ["http://ca.shop.example/crl"]
    assert got["PolicyIdentifiers"] == [[2.0, 23.0, 140.0, 1.0, 2.0, 1.0]]
    assert got["ExtraExtensions"] is None and got["PermittedDNSDomains"] is None
    assert [e["Id"] for e in got["Extensions"]][:2] == [[2.0, 5.0, 29.0, 15.0],
                                                        [2.0, 5.0, 29.0, 19.0]]  # fmt: skip
    assert got["Extensions"][0]["Critical"] is True
    assert "Subject" not in got  # Kyverno's map has the issuer only


def test_the_issuer_is_go_s_pkix_name() -> None:
    issuer = decoded(FULL)["Issuer"]
    assert issuer["CommonName"] == "assay test root" and issuer["SerialNumber"] == "42"
    assert issuer["Country"] == ["NL"] and issuer["Organization"] == ["Assay Test"]
    assert issuer["OrganizationalUnit"] == ["Policies"] and issuer["Locality"] is None
    assert issuer["Names"][0] == {"Type": [2.0, 5.0, 4.0, 6.0], "Value": "NL"}
    assert issuer["ExtraNames"] is None


def test_raw_parts_are_the_der_in_base64() -> None:
    pem = certificate()
    got = decoded(pem)
    cert = x509.load_pem_x509_certificate(pem.encode())
    assert base64.b64decode(got["Raw"]) == cert.public_bytes(serialization.Encoding.DER)
    assert base64.b64decode(got["RawTBSCertificate"]) == cert.tbs_certificate_bytes
    assert base64.b64decode(got["Signature"]) == cert.signature
    assert base64.b64decode(got["RawIssuer"]) == ISSUER.public_bytes()
    spki = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert base64.b64decode(got["RawSubjectPublicKeyInfo"]) == spki


def test_a_serial_of_zero_is_read_as_go_reads_it() -> None:
    assert decoded(with_serial(certificate(), 0))["SerialNumber"] == 0.0


def test_a_plain_certificate_leaves_go_s_zero_values() -> None:
    got = decoded(certificate())
    assert (got["KeyUsage"], got["MaxPathLen"], got["IsCA"]) == (0.0, 0.0, False)
    assert got["BasicConstraintsValid"] is False and got["Extensions"] is None
    assert got["DNSNames"] is None and got["ExtKeyUsage"] is None


def test_the_first_pem_block_is_read_as_go_reads_it() -> None:
    """Text before the block, CRLF line ends and a second block: the first one counts."""
    pem = certificate()
    text = "a bundle\r\n" + pem.replace("\n", "\r\n") + certificate(RSA_KEY, 9)
    assert decoded(text)["SerialNumber"] == 7.0


ERRORS = [
    ("not a valid PEM", "failed to decode PEM block"),
    ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "does not parse"),
    ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END PRIVATE KEY-----\n", "failed to decode PEM"),
    ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "neither contains"),
    (certificate(EC_KEY), "should use rsa algorithm"),
    (with_serial(certificate(), 0xF9), "negative serial number"),  # -7
    (certificate(RSA_KEY, 1, (x509.NameConstraints([x509.DNSName("shop.example")], None),
                              True)), "name constraints is not served"),
]  # fmt: skip


@pytest.mark.parametrize(("pem", "reason"), ERRORS)
def test_what_kyverno_refuses_gives_no_value(pem: str, reason: str) -> None:
    kyverno_fails("x509.decode(object.pem).IsCA", {"object": {"pem": pem}}, match=reason)


def test_a_certificate_request_is_not_served() -> None:
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "web")]))
        .sign(RSA_KEY, hashes.SHA256())
    )
    pem = request.public_bytes(serialization.Encoding.PEM).decode()
    kyverno_fails("x509.decode(object.pem).IsCA", {"object": {"pem": pem}}, match="not served")


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails("x509.decode(object.pem).IsCA", {"object": {"pem": FULL}}, match="Kyverno's library")


def test_each_call_is_charged_by_the_text_it_reads() -> None:
    """A certificate behind 1 MB of text, decoded for each of four items: refused by the
    cost bound (the text read in Python, about 125,000 steps a MB)."""
    expression = Expression("[1, 2, 3, 4].all(i, x509.decode(object.pem).IsCA)")
    data = {"object": {"pem": "x" * 1_000_000 + "\n" + FULL}}
    with in_kyverno_policy(), pytest.raises(CelError, match=r"too costly.*x509\.decode\(\)"):
        expression.evaluate(data, StepMeter(200_000))
