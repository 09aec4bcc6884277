"""Scrubbing never changes what is judged: a Helm-installed cluster, on both backends.

A Helm release Secret's labels (``owner: helm, name: RELEASE, status: deployed``) are
identifiers, repeated in the release's namespace, workload names, labels and images
(tests/helm_releases.py). The model is served every one of them unchanged and can cite
them; probes and imported policies judge objects as stored (an objectSelector on a release
label matches, a credential-shaped ConfigMap value is compared as written); only a
Secret's ``data`` / ``stringData`` is withheld from them, and a probe or policy that reads
it is refused with the reason. Secret values still never leave (the last tests, and
tests/engine/test_secret_scrubbing.py, tests/reliability/test_secrets.py).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from assay.testing.scripted_model import ScriptedModel
from schemas.policy import ImportedPolicy
from schemas.probe import ProposedProbe
from schemas.request import ContextTarget, EvaluationRequest, SnapshotTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.assay.test_cli_check import assay
from tests.cli_support import run_cli
from tests.helm_releases import (
    RELEASES,
    SHOP,
    HelmCluster,
    write_helm_cluster,
)
from workers.engine.toolsets.backend import REDACTED, ClusterBackend
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.factory import build_registry
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.redaction import PATTERNS
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.acceptance import judge
from workers.policy_engine.probes.runner import SECRET_VALUES_WITHHELD, run_probe

BACKENDS = ["snapshot", "live"]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> HelmCluster:
    return write_helm_cluster(tmp_path_factory.mktemp("helm-releases"))


@pytest.fixture(scope="module")
def kubeconfig(helm: HelmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with FakeApiServer([FakeCluster.from_snapshot(helm.path, name="helm")]) as server:
        yield server.write_kubeconfig(tmp_path_factory.mktemp("helm-live") / "kubeconfig")


def _target(backend: str, helm: HelmCluster, kubeconfig: Path) -> SnapshotTarget | ContextTarget:
    if backend == "snapshot":
        return SnapshotTarget(path=str(helm.path))
    return ContextTarget(context="helm", kubeconfig=str(kubeconfig))


def _settings(kubeconfig: Path) -> Any:
    return load_settings(
        kubeconfig=str(kubeconfig),
        kube_request_timeout_seconds=5.0,
        kube_retry_deadline_seconds=5.0,
    )


def _registry(backend: str, helm: HelmCluster, kubeconfig: Path) -> ToolRegistry:
    request = EvaluationRequest(text="anything", target=_target(backend, helm, kubeconfig))
    return build_registry(request, _settings(kubeconfig))


def _backend(backend: str, helm: HelmCluster, kubeconfig: Path) -> ClusterBackend:
    if backend == "snapshot":
        return SnapshotBackend(helm.path)
    return LiveBackend.from_target(ContextTarget(context="helm"), _settings(kubeconfig))


# --------------------------------------------------------------------------- what the model reads


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_name_namespace_label_and_image_of_a_helm_cluster_is_served_unchanged(
    backend: str, helm: HelmCluster, kubeconfig: Path
) -> None:
    registry = _registry(backend, helm, kubeconfig)
    try:
        listing = registry.call("get", {"kind": "Deployment"})
        namespaces = registry.call("get", {"kind": "Namespace"})
        events = registry.call("events", {})
        objects = {
            release.name: registry.call(
                "get",
                {"kind": "Deployment", "name": release.deployment, "namespace": release.namespace},
            )
            for release in RELEASES
        }
        described = registry.call(
            "describe", {"kind": "Deployment", "name": "checkout", "namespace": SHOP}
        )
        release_secret = registry.call(
            "get", {"kind": "Secret", "namespace": SHOP, "name": "sh.helm.release.v1.checkout.v7"}
        )
        secrets = registry.call("get", {"kind": "Secret"})
    finally:
        registry.close()
    results = [listing, namespaces, events, described, release_secret, secrets, *objects.values()]
    assert all(result.ok for result in results), [r.output for r in results if not r.ok]
    for release in RELEASES:
        shown = objects[release.name].output
        assert f"name: {release.deployment}\n" in shown
        assert f"namespace: {release.namespace}\n" in shown
        assert f"app.kubernetes.io/instance: {release.name}\n" in shown
        assert f"meta.helm.sh/release-name: {release.name}\n" in shown
        assert f"helm.sh/chart: {release.chart}\n" in shown
        assert f"image: {release.image}\n" in shown
        assert f"{release.deployment} " in listing.output and release.image in listing.output
        assert release.namespace in namespaces.output
        assert f"release {release.name} deployed: scaled up {release.deployment}" in events.output
        assert f"sh.helm.release.v1.{release.name}.v{release.revision} " in secrets.output
        assert REDACTED not in shown
    assert REDACTED not in listing.output + namespaces.output + events.output + secrets.output
    assert "app.kubernetes.io/instance: checkout" in described.output
    assert "release checkout deployed: scaled up checkout" in described.output
    # the release Secret: its labels are read as stored, its one value is not
    for label in ("owner: helm", "name: checkout", "status: deployed", "version: '7'"):
        assert f"    {label}\n" in release_secret.output
    assert f"release: {REDACTED}" in release_secret.output
    everything = "\n".join(result.output for result in results)
    assert not [value for value in helm.values() if value in everything]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scripted_models_excerpt_naming_a_release_verifies(
    backend: str, helm: HelmCluster, kubeconfig: Path
) -> None:
    """`assay check` as a user runs it, the model served through litellm: it lists the
    release's Deployments, reads one, and cites the release's names and image."""
    release = RELEASES[0]
    lookups = [
        {"kind": "Deployment", "namespace": release.namespace},
        {"kind": "Deployment", "namespace": release.namespace, "name": release.deployment},
    ]
    done = {
        "action": "DONE",
        "verdict": "true",
        "explanation": f"{release.deployment} runs {release.image}",
        "evidence": [
            {"step": 0, "excerpt": f"{release.deployment}  2/2"},
            {"step": 1, "excerpt": f"image: {release.image}"},
            {"step": 1, "excerpt": f"app.kubernetes.io/instance: {release.name}"},
        ],
    }
    turns = [
        {"action": {"action": "COMMAND", "tool": "get", "arguments": args}} for args in lookups
    ]
    scripted = {"scenarios": [{"turns": [*turns, {"action": done}]}]}
    target = ["--snapshot", str(helm.path)] if backend == "snapshot" else ["--context", "helm"]
    with ScriptedModel(scripted) as model:
        result = assay(
            "check",
            *target,
            "--model",
            "openai/scripted",
            "--api-base",
            model.url,
            "--json",
            f"the {release.name} release runs {release.image}",
            env={"ASSAY_API_KEY": "scripted-no-key", "ASSAY_KUBECONFIG": str(kubeconfig)},
        )
        sent = json.dumps([body["messages"] for body in model.requests])
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "true" and verdict["evidence_verified"] is True
    for text in (release.deployment, release.image, f"app.kubernetes.io/instance: {release.name}"):
        assert text in sent
    assert not [value for value in helm.values() if value in sent + result.stdout]


# --------------------------------------------------------------------------- what is judged


def _vap(name: str, group: str, resource: str, rest: str) -> str:
    """A ValidatingAdmissionPolicy on CREATE of ``resource``; ``rest`` holds what follows its
    resource rules (selectors, match conditions, validations), indented as in ``spec``."""
    return f"""
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  matchConstraints:
    resourceRules:
      - {{apiGroups: ["{group}"], apiVersions: [v1], operations: [CREATE], resources: [{resource}]}}
{rest}"""


_REPLICAS_BY_RELEASE_LABEL = (
    _vap(
        "checkout-replicas",
        "apps",
        "deployments",
        """\
  validations:
    - expression: "object.spec.replicas <= 2"
""",
    )
    + """---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: checkout-replicas}
spec:
  policyName: checkout-replicas
  validationActions: [Deny]
  matchResources:
    objectSelector:
      matchLabels: {app.kubernetes.io/instance: checkout}
"""
)
_CONFIGMAP_PASSWORD = _vap(
    "encrypted-passwords",
    "",
    "configmaps",
    """\
  matchConditions:
    - {name: holds-a-password, expression: "has(object.data) && 'password' in object.data"}
  validations:
    - expression: "object.data.password in ['encrypted-password']"
""",
)
_SECRET_DATA = _vap(
    "releases-hold-a-blob",
    "",
    "secrets",
    """\
  validations:
    - expression: "object.type != 'helm.sh/release.v1' || object.data.release != ''"
""",
)
_SECRET_METADATA = _vap(
    "releases-are-labelled",
    "",
    "secrets",
    """\
    objectSelector:
      matchLabels: {owner: helm}
  validations:
    - expression: >-
        object.type == 'helm.sh/release.v1' &&
        object.metadata.name == 'sh.helm.release.v1.' + object.metadata.labels.name + '.v' +
        object.metadata.labels.version &&
        object.metadata.labels.status in ['deployed', 'superseded']
""",
)
RELEASE_SECRETS = sum(release.revision for release in RELEASES)

# policy -> (exit code, what the printed result holds)
EXPECTED = {
    "checkout-replicas": (
        1,
        [
            "policy:checkout-replicas  false  (1 judged, 1 violate it)",
            "Deployment shop/checkout: failed expression: object.spec.replicas <= 2",
        ],
    ),
    "encrypted-passwords": (0, ["policy:encrypted-passwords  true  (1 judged, 0 violate it)"]),
    "releases-hold-a-blob": (
        3,
        ["policy:releases-hold-a-blob  cannot_determine", SECRET_VALUES_WITHHELD],
    ),
    "releases-are-labelled": (
        0,
        [f"policy:releases-are-labelled  true  ({RELEASE_SECRETS} judged, 0 violate it)"],
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("backend", BACKENDS)
def test_imported_policies_judge_a_helm_cluster_as_stored(
    backend: str,
    helm: HelmCluster,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`assay probe import`, then `assay probe test policy:NAME` on the cluster: the
    objectSelector on the release label matches (false, exit 1: 5 replicas), the ConfigMap's
    credential-shaped value is compared as written (true), a policy reading Secret data is
    refused with the reason (3), one reading a release Secret's metadata judges them all."""
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("ASSAY_SNAPSHOT_ROOTS", str(helm.path.parent))
    files = []
    for number, text in enumerate(
        (_REPLICAS_BY_RELEASE_LABEL, _CONFIGMAP_PASSWORD, _SECRET_DATA, _SECRET_METADATA)
    ):
        files.append(helm.path.parent / f"policy-{backend}-{number}.yaml")
        files[-1].write_text(text)
    code, out, err = run_cli(capsys, "probe", "import", *map(str, files))
    assert code == 0, (out, err)
    target = ["--snapshot", str(helm.path)] if backend == "snapshot" else ["--context", "helm"]
    for name, (exit_code, lines) in EXPECTED.items():
        code, out, err = run_cli(capsys, "probe", "test", f"policy:{name}", *target)
        assert code == exit_code, (name, out, err)
        assert all(line in out for line in lines), (name, out)
        assert REDACTED not in out


def _policies(text: str) -> list[ImportedPolicy]:
    policies, refusals = import_documents(documents_from_text(text, "test.yaml"))
    assert refusals == []
    return policies


def _probe(expression: str, kind: str = "Secret", **extra: Any) -> ProposedProbe:
    return ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": kind, "namespace": SHOP}}],
            "expression": expression,
            "scope": "each_object",
            **extra,
        }
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "expression",
    [
        "has(object.data)",
        "!has(object.data) || size(object.data) > 0",
        "object.?data.orValue({}).size() >= 0 && object.metadata.name != ''",
        "object.type == 'Opaque' || 'release' in object.stringData",
        "object.all(field, field != 'data')",
        "object.metadata.annotations[?'kubectl.kubernetes.io/last-applied-configuration']"
        ".orValue('') == ''",
    ],
)
def test_a_probe_reading_secret_values_is_refused_with_the_reason(
    backend: str, expression: str, helm: HelmCluster, kubeconfig: Path
) -> None:
    """Withheld values are absent, so each of these would give a value (most of them true)
    about data it never saw: the probe gives none, and says why."""
    run = run_probe(_probe(expression), _backend(backend, helm, kubeconfig))
    assert run.verdict is None and run.error == SECRET_VALUES_WITHHELD
    assert run.objects_read == 8  # the Secrets were read: metadata, labels and type


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_probe_reads_a_secrets_metadata_and_a_configmaps_values_as_stored(
    backend: str, helm: HelmCluster, kubeconfig: Path
) -> None:
    source = _backend(backend, helm, kubeconfig)
    labelled = run_probe(
        _probe(
            "object.metadata.labels.app == 'checkout' || object.metadata.labels.owner == 'helm'"
        ),
        source,
    )
    helm_only = run_probe(_probe("object.metadata.labels.?owner.orValue('') == 'helm'"), source)
    password = run_probe(
        _probe(
            "object.metadata.name != 'db-settings' || object.data.password == 'encrypted-password'",
            kind="ConfigMap",
        ),
        source,
    )
    # withheld means absent: no key, no placeholder; the rest of the Secret as stored
    stored = source.get(
        source.resolve("Secret"), "sh.helm.release.v1.checkout.v7", SHOP, as_stored=True
    )
    assert "data" not in stored and "stringData" not in stored
    assert stored["metadata"]["labels"]["name"] == "checkout"
    assert stored["type"] == "helm.sh/release.v1"
    assert labelled.verdict == VerdictKind.TRUE and labelled.judged_total == 8
    assert helm_only.verdict == VerdictKind.FALSE  # checkout-db is no release
    assert [v.name for v in helm_only.violations] == ["checkout-db"]
    assert password.verdict == VerdictKind.TRUE, password


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_a_policy_says_of_a_copied_secret_value_is_scrubbed(
    backend: str, helm: HelmCluster, kubeconfig: Path
) -> None:
    """Judged as stored, said scrubbed: the ConfigMap holding a copy of a Secret's value is
    judged by its real text; the message quoting it leaves without the value."""
    policy = _vap(
        "no-seeds",
        "",
        "configmaps",
        """\
  validations:
    - expression: "!has(object.data.notes) || !object.data.notes.contains('seed')"
      messageExpression: "'a seed in the notes: ' + object.data.notes"
""",
    )
    (result,), _ = run_policies(_policies(policy), _backend(backend, helm, kubeconfig))
    assert result.verdict == VerdictKind.FALSE
    (violation,) = result.violations
    assert violation.message == f"a seed in the notes: fallback seed {REDACTED} for the " + (
        "checkout release"
    )
    assert helm.password not in result.model_dump_json()


@pytest.mark.parametrize("backend", BACKENDS)
def test_why_a_proposed_probe_was_accepted_names_no_secret_value(
    backend: str, helm: HelmCluster, kubeconfig: Path
) -> None:
    """The counterfactual that flips a probe may be a literal of its expression, here a
    value the model guessed: the reason (logged, stored) leaves without it."""
    probe = _probe(f"object.data.?notes.orValue('') != '{helm.password}'", kind="ConfigMap")
    outcome = judge(probe, VerdictKind.TRUE, _backend(backend, helm, kubeconfig))
    assert outcome.status == "accepted", outcome.reason
    assert helm.password not in outcome.reason and f"!= '{REDACTED}'" in outcome.reason


def test_assays_own_reason_over_secrets_is_no_credential(helm: HelmCluster, tmp_path: Path) -> None:
    """The reason a policy over Secrets could not run, as the store's pattern layer passes
    it: "over Secret: the snapshot ..." read as a credential key and its value."""
    broken = tmp_path / "helm-broken"
    broken.mkdir()
    (broken / "objects.yaml").write_text((helm.path / "objects.yaml").read_text())
    (broken / "broken.yaml").write_text("kind: [\n")
    (result,), _ = run_policies(_policies(_SECRET_METADATA), SnapshotBackend(broken))
    assert result.verdict == VerdictKind.CANNOT_DETERMINE and result.reason
    assert "the snapshot has 1 problem(s)" in result.reason
    assert PATTERNS.text(result.reason) == result.reason


@pytest.mark.parametrize(
    "text",
    [
        "rule x over Secret: the snapshot has 1 problem(s)",
        "Token: expired, log in again",
        "password: required for user admin",
        "image: registry.example.com/platform/vault-token:1.2.0",
        "open /var/run/secrets/token: permission denied",
        "secret: none",
    ],
)
def test_ordinary_words_and_paths_are_no_credentials(text: str) -> None:
    assert PATTERNS.text(text) == text


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("password: hunter22 for user admin", f"password: {REDACTED} for user admin"),
        ("Token: tk-1234 expired", f"Token: {REDACTED} expired"),
        ("secret=abc", f"secret={REDACTED}"),
        ("login --password the-pw", f"login --password {REDACTED}"),
    ],
)
def test_credentials_after_a_credential_word_are_still_scrubbed(text: str, scrubbed: str) -> None:
    assert PATTERNS.text(text) == scrubbed


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_secrets_last_applied_copy_is_withheld_and_its_older_values_learned(
    backend: str, tmp_path: Path
) -> None:
    """The last-applied annotation holds the manifest as applied: after a rotation, the old
    value. It is withheld from probes like ``data``, and its values are scrubbed from what
    the model reads wherever they were copied."""
    old, new = "Old-pw-5c1e9a77b3", "New-pw-0d4f62aa19"
    manifest = {"apiVersion": "v1", "kind": "Secret", "stringData": {"password": old},
                "metadata": {"name": "db", "namespace": SHOP}}  # fmt: skip
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": SHOP, "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(manifest),
            "team": "payments"}},
        "data": {"password": base64.b64encode(new.encode()).decode()},
    }  # fmt: skip
    copy = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "env", "namespace": SHOP},
            "data": {"previous": f"was {old}"}}  # fmt: skip
    folder = tmp_path / "rotated"
    folder.mkdir()
    (folder / "objects.yaml").write_text(yaml.safe_dump_all([secret, copy]))
    with FakeApiServer([FakeCluster.from_snapshot(folder, name="rotated")]) as server:
        settings = _settings(server.write_kubeconfig(tmp_path / "kubeconfig"))
        source: ClusterBackend = (
            SnapshotBackend(folder)
            if backend == "snapshot"
            else LiveBackend.from_target(ContextTarget(context="rotated"), settings)
        )
        stored = source.get(source.resolve("Secret"), "db", SHOP, as_stored=True)
        shown = next(iter(source.list_objects(source.resolve("ConfigMap"), SHOP)))
    assert stored["metadata"]["annotations"] == {"team": "payments"} and "data" not in stored
    assert shown["data"] == {"previous": f"was {REDACTED}"}
