"""A Kyverno ValidatingPolicy that uses Kyverno's libraries of data (``yaml.parse``,
``math.round``, ``time.truncate`` / ``toCron`` / ``now``, ``gzip.decompress``,
``listObjToMap``, ``x509.decode``) judges a stored cluster with `assay probe import` and
`assay probe test`, as Kyverno does; a document the library cannot read gives no verdict;
what a check cannot answer as Kyverno does (``gzip.compress``, ``random``) is refused at
import with its reason, and so is each library in a ValidatingAdmissionPolicy, which has
none."""

from __future__ import annotations

import datetime
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.cli_support import run_cli as run
from tests.kyverno_support import dry_import, policy_text, write_objects

GREETING = "".join(f"\\x{byte:02x}" for byte in gzip.compress(b"hello", mtime=0))
POLICY = f"""
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {{name: settings-by-library}}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [configmaps]
  variables:
    - name: settings
      expression: "yaml.parse(object.data['settings.yaml'])"
    - name: ports
      expression: >-
        transform.listObjToMap(variables.settings.ports, variables.settings.ports, 'name', 'port')
  validations:
    - expression: "variables.settings.replicas <= 5.0"
      messageExpression: "'replicas: ' + string(variables.settings.replicas)"
    - expression: "math.round(double(object.data.ratio), 1) <= 0.5"
      message: the ratio rounds past 0.5
    - expression: "variables.ports[?'http'].orValue(80.0) == 80.0"
      message: http is not on port 80
    - expression: >-
        time.toCron(timestamp(object.metadata.creationTimestamp)).split(' ')[4] != '0' &&
        time.truncate(timestamp(object.metadata.creationTimestamp), duration('24h'))
        < time.now()
      message: created on a Sunday
    - expression: >-
        object.metadata.?labels[?'greeting'].orValue('hello') ==
        gzip.decompress(b"{GREETING}")
      message: the greeting label is not the packed greeting
    - expression: >-
        !('ca.crt' in object.data) || x509.decode(object.data['ca.crt']).IsCA
      messageExpression: >-
        'ca.crt is no CA: ' + x509.decode(object.data['ca.crt']).Issuer.CommonName
"""


def _config_map(name: str, settings: str, ratio: str, created: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created},
        "data": {"settings.yaml": settings, "ratio": ratio},
    }


def _certificate(*, ca: bool) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shop root")])
    start = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(1)
        .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM).decode()


PROBE = "policy:settings-by-library"
MONDAY = "2024-07-01T10:00:00Z"
SUNDAY = "2024-06-30T10:00:00Z"
GOOD = "replicas: 3\nports:\n- {name: http, port: 80}\n- {name: metrics, port: 9090}\n"


@pytest.mark.integration
def test_kyverno_s_data_libraries_judge_a_snapshot(
    capsys: pytest.CaptureFixture[str], cli_store: Path
) -> None:
    store = cli_store
    (store / "policy.yaml").write_text(POLICY)
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 0, out + err
    labelled = _config_map("labelled", GOOD, "0.5", MONDAY)
    labelled["metadata"]["labels"] = {"greeting": "hi"}
    maps = [
        _config_map("good", GOOD, "0.54", MONDAY),  # 0.54 rounds to 0.5
        _config_map("many", "replicas: 0x10\nports: []\n", "0.1", MONDAY),  # 16, Go's hex
        _config_map("ratio", GOOD, "0.55", MONDAY),  # rounds half away from zero: 0.6
        _config_map("port", GOOD.replace("port: 80}", "port: 8080}"), "0.1", MONDAY),
        _config_map("sunday", GOOD, "0.1", SUNDAY),
        labelled,
    ]
    leaf = _config_map("leaf", GOOD, "0.1", MONDAY)
    leaf["data"]["ca.crt"] = _certificate(ca=False)
    authority = _config_map("authority", GOOD, "0.1", MONDAY)
    authority["data"]["ca.crt"] = _certificate(ca=True)
    maps += [leaf, authority]
    write_objects(store / "cluster", *maps)
    code, out, _ = run(capsys, "probe", "test", PROBE, "--snapshot", "cluster")
    text = " ".join(out.split())
    assert code == 1, out
    assert "(8 judged, 6 violate it)" in text, text
    assert "ConfigMap shop/leaf: ca.crt is no CA: shop root" in text, text
    assert "ConfigMap shop/many: replicas: 16" in text, text
    assert "ConfigMap shop/ratio: the ratio rounds past 0.5" in text, text
    assert "ConfigMap shop/port: http is not on port 80" in text, text
    assert "ConfigMap shop/sunday: created on a Sunday" in text, text
    assert "ConfigMap shop/labelled: the greeting label is not the packed greeting" in text
    # a ValidatingAdmissionPolicy has none of these libraries: not exported as one
    code, out, err = run(capsys, "probe", "export", PROBE, "--format", "vap")
    text = " ".join((out + err).split())
    assert code != 0 and "calls yaml.parse of Kyverno's own CEL libraries" in text, text
    # a settings document Kyverno cannot read (a null key): no verdict, never a pass
    write_objects(store / "cluster", _config_map("unreadable", "~: 1\n", "0.1", MONDAY))
    code, out, _ = run(capsys, "probe", "test", PROBE, "--snapshot", "cluster")
    assert code == 3, out
    assert "unsupported map key" in out, out


RefusedAtImport = Callable[[str, str, str, str], None]


@pytest.fixture
def refused_at_import(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> RefusedAtImport:
    """``(kind, name, expression, reason)``: a ``kind`` named ``name`` with the one check
    ``expression`` is refused at import, saying ``reason``."""

    def refused(kind: str, name: str, expression: str, reason: str) -> None:
        validations = f'  validations:\n    - expression: "{expression}"\n'
        policy = policy_text(name, "configmaps", validations, kind=kind)
        code, text = dry_import(capsys, monkeypatch, tmp_path, policy)
        assert code == 65, text
        assert name in text and reason in text, text

    return refused


KYVERNO_REFUSED = [
    ("gzip.compress(object.metadata.name) != b''", "Go's own deflate encoder"),
    ("random() != object.metadata.name", "random library: its answer is new at every call"),
    ("random.random('[a-z]{4}') != ''", "random library: its answer is new at every call"),
    (
        "user.parseServiceAccount('system:serviceaccount:a:b').Name == 'b'",
        "Kyverno's user library, which assay does not serve",
    ),
    (
        "parseServiceAccount('system:serviceaccount:a:b').Name == 'b'",
        "parseServiceAccount, of Kyverno's user library, which assay does not serve",
    ),
]


@pytest.mark.parametrize(("expression", "reason"), KYVERNO_REFUSED)
def test_what_a_check_cannot_answer_as_kyverno_is_refused_at_import(
    refused_at_import: RefusedAtImport, expression: str, reason: str
) -> None:
    refused_at_import("ValidatingPolicy", "unanswerable", expression, reason)


VAP_REFUSED = [
    ("yaml.parse(object.data.s) != null", "Kyverno's yaml library"),
    ("math.round(1.25, 1) == 1.3", "Kyverno's math library"),
    ("time.now() > timestamp('2020-01-01T00:00:00Z')", "Kyverno's time library"),
    ("gzip.decompress(b'') == ''", "Kyverno's gzip library"),
    ("transform.listObjToMap([], [], 'a', 'b') == {}", "Kyverno's transform library"),
    ("listObjToMap([], [], 'a', 'b') == {}", "it calls listObjToMap, of Kyverno's transform"),
    ("x509.decode(object.data.cert).IsCA", "Kyverno's x509 library"),
]


@pytest.mark.parametrize(("expression", "reason"), VAP_REFUSED)
def test_a_validating_admission_policy_has_none_of_them(
    refused_at_import: RefusedAtImport, expression: str, reason: str
) -> None:
    refused_at_import("ValidatingAdmissionPolicy", "kyverno-calls", expression, reason)
