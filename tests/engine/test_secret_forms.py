"""Every form a copied Secret value takes is scrubbed, on the snapshot and the live backend.

A Secret value holding ``"``, ``\\``, a space, ``+``, ``/`` and ``@`` is copied into
ConfigMaps the ways real configuration copies it: inside a JSON document, percent-encoded
(``%20`` and ``+`` for the space, escapes in upper and lower case, Python's and
JavaScript's sets of unescaped characters), and hex-encoded (lower and upper case); a
multi-line value is copied into JSON as one line. A Helm release Secret's value is copied
into a ConfigMap too, which the live backend must learn as the snapshot backend does. The
same folder is served as a snapshot and through the test API server.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.request import ContextTarget, EvaluationRequest, SnapshotTarget
from schemas.settings import load_settings
from workers.engine.toolsets.backend import REDACTED
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.factory import build_registry
from workers.engine.toolsets.redaction import SecretScrubber

NAMESPACE = "shop"


def _lower_escapes(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group(0).lower(), text)


def copies(value: str) -> dict[str, str]:
    """How a copy of ``value`` reads in each encoding, by name."""
    raw = value.encode()
    return {
        "json": json.dumps(value)[1:-1],
        "json, non-ASCII kept": json.dumps(value, ensure_ascii=False)[1:-1],
        "json, slashes escaped": json.dumps(value)[1:-1].replace("/", "\\/"),
        "percent %20": quote(value, safe=""),
        "percent +": quote_plus(value, safe=""),
        "percent, lower-case escapes": _lower_escapes(quote(value, safe="")),
        "percent, JavaScript's": quote(value, safe="-._~!'()*"),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A snapshot folder with the Secrets and their copies; what to look for in outputs."""
    root = tmp_path_factory.mktemp("forms") / "cluster"
    (root / NAMESPACE).mkdir(parents=True)
    token = secrets.token_hex(6)
    value = f'Pa"ss\\w0rd (no) +/@ {token}'
    multi = f'first-line-{token}\nsecond "quoted" line {token}\n'
    helm = "H4sIAAAAAAAC" + secrets.token_urlsafe(48)  # what Helm's release blob looks like
    name = f"cfg-{token}"  # a Secret value that is also a ConfigMap's name
    forms = copies(value)
    multi_json = json.dumps(multi)[1:-1]
    documents: list[dict[str, Any]] = [
        _secret("app-credentials", {"db": value, "multi": multi, "suffix": name}),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "sh.helm.release.v1.web.v1", "namespace": NAMESPACE},
            "type": "helm.sh/release.v1",
            "data": {"release": base64.b64encode(helm.encode()).decode()},
        },
        _config_map("copies", {label: f"before {form} after" for label, form in forms.items()}),
        _config_map("settings-json", {"config.json": json.dumps({"copy": value, "m": multi})}),
        _config_map("release-copy", {"blob": helm}),
        _config_map(name, {"plain": "nothing secret here"}),
    ]
    (root / NAMESPACE / "objects.yaml").write_text(yaml.safe_dump_all(documents))
    planted = {**forms, "multi-line value as JSON": multi_json, "raw": value, "helm": helm}
    return {"root": root, "planted": planted, "name": name}


def _secret(name: str, values: dict[str, str]) -> dict[str, Any]:
    data = {key: base64.b64encode(v.encode()).decode() for key, v in values.items()}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": data,
            "metadata": {"name": name, "namespace": NAMESPACE}}  # fmt: skip


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": {"name": name, "namespace": NAMESPACE}}  # fmt: skip


@pytest.fixture(scope="module")
def kubeconfig(cluster: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with FakeApiServer([FakeCluster.from_snapshot(cluster["root"], name="forms")]) as server:
        yield server.write_kubeconfig(tmp_path_factory.mktemp("forms-live") / "kubeconfig")


def _registry(backend: str, cluster: dict[str, Any], kubeconfig: Path) -> ToolRegistry:
    if backend == "snapshot":
        target: Any = SnapshotTarget(path=str(cluster["root"]))
    else:
        target = ContextTarget(context="forms", kubeconfig=str(kubeconfig))
    settings = load_settings(kube_request_timeout_seconds=5.0, kube_retry_deadline_seconds=5.0)
    return build_registry(EvaluationRequest(text="anything", target=target), settings)


@pytest.mark.parametrize("backend", ["snapshot", "live"])
def test_no_encoded_copy_of_a_secret_value_reaches_a_tool_output(
    backend: str, cluster: dict[str, Any], kubeconfig: Path
) -> None:
    registry = _registry(backend, cluster, kubeconfig)
    try:
        outputs = [
            registry.call("get", {"kind": "ConfigMap", "name": name, "namespace": NAMESPACE})
            for name in ("copies", "settings-json", "release-copy")
        ]
        outputs.append(registry.call("describe", {"kind": "ConfigMap", "name": "copies",
                                                   "namespace": NAMESPACE}))  # fmt: skip
    finally:
        registry.close()
    assert all(result.ok for result in outputs), [r.output for r in outputs]
    everything = "\n".join(result.output for result in outputs)
    leaked = [label for label, form in cluster["planted"].items() if form in everything]
    assert leaked == []
    assert f"before {REDACTED} after" in everything  # the copies were there, now redacted


@pytest.mark.parametrize("backend", ["snapshot", "live"])
def test_an_object_named_after_a_secret_value_is_found_by_it_and_shown_redacted(
    backend: str, cluster: dict[str, Any], kubeconfig: Path
) -> None:
    """Both backends alike: the name is the object's (the store holds it as the API server
    does), the value never leaves; the name as shown says why it finds nothing."""
    registry = _registry(backend, cluster, kubeconfig)
    try:
        found = registry.call(
            "get", {"kind": "ConfigMap", "name": cluster["name"], "namespace": NAMESPACE}
        )
        listing = registry.call("get", {"kind": "ConfigMap", "namespace": NAMESPACE})
        by_shown = registry.call("describe", {"kind": "ConfigMap", "name": REDACTED,
                                              "namespace": NAMESPACE})  # fmt: skip
        missing = registry.call(
            "get", {"kind": "ConfigMap", "name": "absent", "namespace": NAMESPACE}
        )
    finally:
        registry.close()
    assert found.ok and "nothing secret here" in found.output
    assert cluster["name"] not in found.output and f"name: {REDACTED}" in found.output
    assert cluster["name"] not in listing.output and REDACTED in listing.output
    assert not by_shown.ok and "holds a Secret's value" in by_shown.output
    assert "listing of its kind" in by_shown.output
    assert missing.output == "not found: ConfigMap 'absent' not found in namespace 'shop'"


_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_VALUE = st.text(min_size=8, max_size=40).filter(
    lambda v: v.strip() == v and len(v.splitlines()) == 1  # a multi-line value goes by its lines
)


@settings(max_examples=150, deadline=None)
@given(value=_VALUE, before=_TEXT, after=_TEXT, form=st.sampled_from(list(copies("x"))))
def test_an_encoded_copy_never_survives_in_any_surrounding_text(
    value: str, before: str, after: str, form: str
) -> None:
    planted = copies(value)[form]
    scrubbed = SecretScrubber([value]).text(before + planted + after)
    assert planted not in scrubbed
