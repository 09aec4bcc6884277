"""Labelled policy fixtures, read from a policy library's own tests, and judged by import.

Two layouts are read, the ones the public policy libraries use:

* Kyverno's CLI tests (``apiVersion: cli.kyverno.io/...``, ``kind: Test``, usually in a
  ``.kyverno-test/`` folder): ``policies`` (files), ``resources`` (files of objects) and
  ``results`` naming, per policy (and rule), the resources that ``pass``, ``fail`` or are
  ``skip``-ped; ``exceptions`` (PolicyException files, imported with the policies) and
  ``context`` (a ``Context`` whose ``spec.resources`` are other objects of the cluster, what
  ``resource.Get`` / ``List`` read) and ``clusterResources`` (files of such objects) when
  given; ``globalContextEntries`` as the stored cluster would hold them
  (:func:`global_context_mocks`). assay's own corpus
  (tests/fixtures/cel_corpus/) is written in this layout.
* Gatekeeper's suites (``kind: Suite``, ``test.gatekeeper.sh``): per test a template and a
  constraint, and cases of one object each with ``violations: yes|no|N``. A case whose
  object is an AdmissionReview of anything but a CREATE (an update, a deletion) judges a
  request, not a stored object, and is left out (counted).

Every fixture is one object with a label: allowed (``pass``, ``skip``, no violations) or
disallowed. :func:`judge` imports the fixture's policy as ``assay probe import`` does, runs
it over a snapshot holding that one object as a check would, and compares. The bench
(bench/bench_cel.py) and the corpus tests print and assert the figures.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from assay.testing.api_server_defaults import (
    as_the_api_server_stores,
    stored_namespace,
    with_defaults,
)
from assay.testing.chainsaw_suite import is_chainsaw_test, read_chainsaw_test
from assay.testing.kyverno_configuration import Conformance
from assay.testing.vap_library_suite import is_library_root, read_vap_library
from schemas.policy import ImportedPolicy
from schemas.verdict import VerdictKind
from workers.engine.toolsets.kinds import guess_plural
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies.cluster_reads import GLOBAL_CONTEXT_KIND
from workers.policy_engine.policies.documents import (
    SourcedDocument,
    documents_from_text,
    name_of,
)
from workers.policy_engine.policies.expressions import global_calls, references
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.kyverno_exceptions import EXCEPTION_KIND, Acceptance
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.export import NotExportable, export_policy_documents
from workers.policy_engine.probes.translation import with_namespace

TEST_KINDS = frozenset({"Test"})


@dataclass(frozen=True)
class Fixture:
    """One labelled object: which policy (and rule) judges it, and whether it is allowed."""

    source: str  # the test file
    policy_files: tuple[str, ...]
    policy: str
    rule: str | None
    obj: dict[str, Any] = field(hash=False, compare=False)
    allowed: bool
    label: str  # pass, fail, skip; yes, no (Gatekeeper); admitted, denied (chainsaw)
    # the test's Namespace the object is in, stored beside it: the cluster it is judged on
    # holds it (namespace selectors, namespaceObject), as the engine's test tool is given it
    namespaces: tuple[dict[str, Any], ...] = field(default=(), hash=False, compare=False)
    # other objects the cluster held when the engine gave the label (a chainsaw test's
    # ConfigMap made in an earlier step), stored beside it too
    context: tuple[dict[str, Any], ...] = field(default=(), hash=False, compare=False)
    # which PolicyExceptions the engine that gave the label applied (its configuration)
    exceptions: Acceptance = field(default_factory=Acceptance)
    # a real API server stored the object before the engine judged it (a chainsaw test):
    # judged with the defaults it fills in (api_server_defaults.py)
    defaulted: bool = False

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata") or {}
        where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
        return f"{self.obj.get('kind')} {where}{meta.get('name')}"


@dataclass
class Reading:
    """What a library holds: its fixtures, and what could not be read (counted, named)."""

    fixtures: list[Fixture] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    # files a reader had to write (a library case's binding and params); removed with it
    scratch: tempfile.TemporaryDirectory[str] | None = None


def _load(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    try:
        return [d.document for d in documents_from_text(text, str(path))]
    except ValueError:
        return []


def read_library(root: Path) -> Reading:
    """Every Kyverno CLI test, Kyverno chainsaw test and Gatekeeper suite under ``root``, or
    the cases of a ValidatingAdmissionPolicy library laid out as kubescape's
    (``controls/*/tests.json``)."""
    reading = Reading()
    if is_library_root(root):
        reading.scratch = tempfile.TemporaryDirectory(prefix="assay-vap-library-")
        for case in read_vap_library(root, Path(reading.scratch.name), reading.skipped):
            reading.fixtures.append(
                Fixture(
                    source=case.source,
                    policy_files=case.policy_files,
                    policy=case.policy,
                    rule=None,
                    obj=case.obj,
                    allowed=case.allowed,
                    label=case.label,
                )
            )
        return reading
    conformance = Conformance.of(root)
    for path in sorted(root.rglob("*.yaml")):
        if path.name.startswith(("artifacthub", "kustomization")) or not path.is_file():
            continue
        head = path.read_text(encoding="utf-8", errors="replace")[:4000]
        if "kind: Test" in head and "cli.kyverno.io" in head:
            _read_kyverno_test(path, reading)
        elif "kind: Suite" in head and "test.gatekeeper.sh" in head:
            _read_gatekeeper_suite(path, reading)
        elif is_chainsaw_test(head):
            for found in read_chainsaw_test(path, reading.skipped):
                reading.fixtures.append(
                    Fixture(
                        source=found.source,
                        policy_files=found.policy_files,
                        policy=found.policy,
                        rule=found.rule,
                        obj=found.obj,
                        allowed=found.allowed,
                        label=found.label,
                        namespaces=tuple(o for o in found.context if o.get("kind") == "Namespace"),
                        context=tuple(o for o in found.context if o.get("kind") != "Namespace"),
                        exceptions=conformance.exceptions_for(path),
                        defaulted=True,
                    )
                )
    return reading


def _read_kyverno_test(path: Path, reading: Reading) -> None:
    try:
        test = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        reading.skipped["a test file that is not YAML"] += 1
        return
    if not isinstance(test, dict) or test.get("kind") not in TEST_KINDS:
        return
    base = path.parent
    # the test's PolicyExceptions go with its policies: Kyverno applies them to the results
    named = [*(test.get("policies") or []), *(test.get("exceptions") or [])]
    policies = tuple(str((base / p).resolve()) for p in named)
    objects = [o for file in test.get("resources") or [] for o in _load(base / file)]
    namespaces = tuple(o for o in objects if o.get("kind") == "Namespace")
    namespaces += _values_namespaces(base, test, {name_of(o) for o in namespaces})
    context = tuple(
        item
        for document in (_load(base / test["context"]) if test.get("context") else [])
        if document.get("kind") == "Context"
        for item in (document.get("spec") or {}).get("resources") or []
    ) + tuple(
        o
        for file in [*(test.get("clusterResources") or []), *(test.get("paramResources") or [])]
        for document in _load(base / file)
        for o in _unwrapped(document, (base / file).parent)
    )  # a binding's params objects are objects of the cluster, read from it as the API server does
    mocked = global_context_mocks(test, base, [*objects, *context])
    if mocked is None:
        reading.skipped["a test whose globalContextEntries mock no stored cluster"] += len(
            [r for result in test.get("results") or [] for r in result.get("resources") or []]
        )
        return
    context += mocked
    for result in test.get("results") or []:
        label = str(result.get("result") or "").strip()
        if label not in ("pass", "fail", "skip"):
            reading.skipped[f"a result of {label or 'no value'}"] += len(
                result.get("resources") or []
            )
            continue
        for wanted in result.get("resources") or []:
            obj = _find(
                objects, str(result.get("kind") or ""), str(wanted), result.get("namespace")
            )
            if obj is None:
                reading.skipped["a result naming an object the test's resources lack"] += 1
                continue
            reading.fixtures.append(
                Fixture(
                    source=str(path),
                    policy_files=policies,
                    policy=str(result.get("policy") or ""),
                    rule=result.get("rule"),
                    obj=obj,
                    allowed=label != "fail",
                    label=label,
                    namespaces=_own_namespace(obj, namespaces),
                    context=context,
                )
            )


def _unwrapped(document: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """The objects of a cluster-resources file: the document itself, or, for the Kyverno
    CLI's ``ClusterResource`` wrapper (``cli.kyverno.io``), the objects it lists and the
    CustomResourceDefinitions of its ``crds`` files (relative to ``folder``): the cluster
    holds them, and they say which custom kinds are cluster-scoped."""
    if document.get("kind") != "ClusterResource" or not str(
        document.get("apiVersion") or ""
    ).startswith("cli.kyverno.io/"):
        return [document]
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    crds = [d for file in spec.get("crds") or [] for d in _load(folder / str(file))]
    return [o for o in [*crds, *(spec.get("resources") or [])] if isinstance(o, dict)]


def global_context_mocks(
    test: dict[str, Any], base: Path, others: list[dict[str, Any]]
) -> tuple[dict[str, Any], ...] | None:
    """A Kyverno CLI test's ``globalContextEntries`` as what a stored cluster would hold: an
    entry of objects (``resources``, ``resourceFiles``) is those objects and a
    GlobalContextEntry listing them (their kind, in their namespace); an entry of ``data``
    is a service's answer, so its GlobalContextEntry calls one (``apiCall``), which a check
    refuses as outside the cluster. None when the objects cannot be listed apart from the
    test's others (several kinds or namespaces, others of theirs in their namespace) or the
    entry reshapes them (``fieldPath``, the CLI's projections), which no entry does."""
    out: list[dict[str, Any]] = []
    for mock in test.get("globalContextEntries") or []:
        if not isinstance(mock, dict) or not mock.get("name"):
            return None
        meta = {"name": str(mock["name"])}
        if mock.get("data") is not None:
            api = {"urlPath": "/mocked", "refreshInterval": "1h"}
            out.append(_global_context_entry(meta, {"apiCall": api}))
            continue
        objects = [o for o in mock.get("resources") or [] if isinstance(o, dict)]
        objects += [o for file in mock.get("resourceFiles") or [] for o in _load(base / file)]
        if mock.get("fieldPath") or mock.get("projections") or not objects:
            return None
        objects = [with_namespace(o) for o in objects]
        kinds = {(str(o.get("apiVersion")), str(o.get("kind"))) for o in objects}
        namespaces = {(o.get("metadata") or {}).get("namespace") for o in objects}
        if len(kinds) != 1 or len(namespaces) != 1:
            return None
        ((api_version, kind),) = kinds
        (namespace,) = namespaces
        if any(
            o.get("kind") == kind and (with_namespace(o).get("metadata") or {}).get("namespace")
            == namespace for o in [*others, *out]
        ):  # fmt: skip
            return None
        group, _, version = api_version.rpartition("/")
        source = {"group": group, "version": version, "resource": guess_plural(kind)}
        if namespace:
            source["namespace"] = str(namespace)
        out += [*objects, _global_context_entry(meta, {"kubernetesResource": source})]
    return tuple(out)


def _global_context_entry(meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry",
            "metadata": meta, "spec": spec}  # fmt: skip


def _values_namespaces(
    base: Path, test: dict[str, Any], given: set[str]
) -> tuple[dict[str, Any], ...]:
    """The Namespaces a Kyverno CLI test's values file describes (``namespaces``: whole
    objects; ``namespaceSelector``: a name and its labels); those the test's resources give
    are theirs."""
    if not test.get("variables"):
        return ()
    written: list[dict[str, Any]] = []
    for document in _load(base / str(test["variables"])):
        written += [
            n for n in document.get("namespaces") or []
            if isinstance(n, dict) and n.get("kind") == "Namespace"
        ]  # fmt: skip
        written += [
            _namespace(str(e.get("name") or ""), e.get("labels") or {})
            for e in document.get("namespaceSelector") or []
            if isinstance(e, dict)
        ]
    found: list[dict[str, Any]] = []
    for namespace in written:
        name = name_of(namespace)
        if name and name not in given:
            found.append(namespace)
            given = given | {name}
    return tuple(found)


def _namespace(name: str, labels: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _own_namespace(
    obj: dict[str, Any], namespaces: tuple[dict[str, Any], ...]
) -> tuple[dict[str, Any], ...]:
    """The Namespace of ``namespaces`` that ``obj`` is in (``default`` when it names none)."""
    if obj.get("kind") == "Namespace":
        return ()
    name = with_namespace(obj).get("metadata", {}).get("namespace")
    return tuple(n for n in namespaces if (n.get("metadata") or {}).get("name") == name)[:1]


def _namespaces_they_live_in(obj: dict[str, Any], fixture: Fixture) -> list[dict[str, Any]]:
    """The Namespaces the object and the cluster's other objects live in, as the cluster that
    labelled it held them, where the test does not give them: a namespaced object was
    admitted into an existing Namespace (``default`` is in every cluster; each is labelled
    with its name when the snapshot is written, as every Namespace is). Without them a
    stored snapshot would lack what any real cluster holds, and a policy reading
    ``namespaceObject`` would get no verdict."""
    given = {
        str((o.get("metadata") or {}).get("name"))
        for o in [*fixture.namespaces, *fixture.context]
        if o.get("kind") == "Namespace"
    }
    found: list[dict[str, Any]] = []
    for other in [obj, *(with_namespace(o) for o in fixture.context)]:
        name = (other.get("metadata") or {}).get("namespace")
        # cluster-scoped (with_namespace put every namespaced object in one) or given
        if other.get("kind") == "Namespace" or not name or name in given:
            continue
        given.add(name)
        found.append(_namespace(name, {}))
    return found


def _find(
    objects: list[dict[str, Any]], kind: str, wanted: str, namespace: Any
) -> dict[str, Any] | None:
    ns, _, name = wanted.rpartition("/")
    ns = ns or (str(namespace) if namespace else "")
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != kind or meta.get("name") != name:
            continue
        if ns and (meta.get("namespace") or "default") != ns:
            continue
        return obj
    return None


def _read_gatekeeper_suite(path: Path, reading: Reading) -> None:
    try:
        suite = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return
    base = path.parent
    for test in (suite or {}).get("tests") or []:
        template, constraint = test.get("template"), test.get("constraint")
        if not template or not constraint:
            continue
        constraints = _load(base / constraint)
        name = ((constraints[0].get("metadata") or {}).get("name")) if constraints else ""
        files = (str((base / template).resolve()), str((base / constraint).resolve()))
        for case in test.get("cases") or []:
            if case.get("inventory"):
                reading.skipped["a Gatekeeper case with inventory (other cluster objects)"] += 1
                continue
            objects = _load(base / str(case.get("object") or ""))
            if len(objects) != 1:
                reading.skipped["a Gatekeeper case without exactly one object"] += 1
                continue
            obj = objects[0]
            if obj.get("kind") == "AdmissionReview":
                request = obj.get("request") or {}
                if str(request.get("operation") or "CREATE") != "CREATE" or not request.get(
                    "object"
                ):
                    reading.skipped["a Gatekeeper case judging an update or deletion request"] += 1
                    continue
                obj = request["object"]
            violations = [a.get("violations") for a in case.get("assertions") or []]
            allowed = all(v in ("no", 0, False, "0") for v in violations)
            reading.fixtures.append(
                Fixture(
                    source=str(path),
                    policy_files=files,
                    policy=str(name),
                    rule=None,
                    obj=obj,
                    allowed=allowed,
                    label="no" if allowed else "yes",
                )
            )


@dataclass
class Judgement:
    fixture: Fixture
    value: bool | None  # the policy's verdict (None: no value)
    reason: str = ""
    seconds: float = 0.0
    judged: int = 0


@dataclass
class Figures:
    """What bench_cel.py prints for a library."""

    judgements: list[Judgement]
    refused: Counter[str]
    exports: dict[str, tuple[int, int]]  # format -> (valid, tried)
    export_problems: Counter[str]
    skipped: Counter[str]

    @property
    def valued(self) -> list[Judgement]:
        return [j for j in self.judgements if j.value is not None]

    @property
    def disagreements(self) -> list[Judgement]:
        return [j for j in self.valued if j.value != j.fixture.allowed]

    def lines(self) -> list[str]:
        total = len(self.judgements)
        valued = len(self.valued)
        agree = valued - len(self.disagreements)
        times = sorted(j.seconds for j in self.valued) or [0.0]
        out = [
            f"fixtures: {total} (left out: {sum(self.skipped.values())})",
            f"a probe value: {valued} of {total} ({100 * valued / max(total, 1):.1f}%)",
            f"agree with their label: {agree} of {valued} ({100 * agree / max(valued, 1):.1f}%)",
            f"median probe time: {1000 * statistics.median(times):.2f} ms "
            f"(p90 {1000 * times[int(0.9 * (len(times) - 1))]:.2f} ms)",
        ]
        for fmt, (valid, tried) in self.exports.items():
            out.append(f"exports to a valid {fmt}: {valid} of {tried} accepted policies")
        return out


# the documents a policy is imported with that are no policy (each named apart in refusals)
_NOT_POLICIES = frozenset({EXCEPTION_KIND, GLOBAL_CONTEXT_KIND})
# a policy's files, and which of their PolicyExceptions the engine applied
_Source = tuple[tuple[str, ...], Acceptance]


class Judge:
    """Imports each policy file set once, and judges fixtures with it."""

    def __init__(self) -> None:
        self._imports: dict[_Source, tuple[list[ImportedPolicy], dict[str, str]]] = {}
        # per policy that gave a value: each format's export problem (None: valid), tried
        # with the first fixture's snapshot as the target (it serves the kind: a custom
        # resource's group and version come from there, as `--snapshot` gives them)
        self._valued: dict[tuple[_Source, str], list[dict[str, Any]]] = {}

    def exports(self) -> dict[tuple[_Source, str], dict[str, str | None]]:
        """Each policy that gave a value, exported in each format: the problem, or None.
        The target is a snapshot of every object its fixtures hold, so a custom resource's
        group and version come from there, as ``--snapshot`` gives them."""
        out: dict[tuple[_Source, str], dict[str, str | None]] = {}
        for (source, name), objects in self._valued.items():
            imported, _ = self.policies(source)
            policy = next(p for p in imported if p.name == name)
            with tempfile.TemporaryDirectory(prefix="assay-corpus-") as folder:
                for number, obj in enumerate(objects):
                    (Path(folder) / f"{number}.json").write_text(json.dumps(obj))
                out[(source, name)] = _exports(policy, SnapshotBackend(folder))
        return out

    def policies(self, source: _Source) -> tuple[list[ImportedPolicy], dict[str, str]]:
        cached = self._imports.get(source)
        if cached is None:
            files, accepted = source
            documents: list[SourcedDocument] = []
            for file in files:
                documents += [SourcedDocument(file, d) for d in _load(Path(file))]
            imported, refusals = import_documents(documents, exceptions_accepted=accepted)
            # a policy's own refusal is its reason, not that of a document of another kind
            # with its name (an exception named as the policy it exempts)
            ordered = sorted(refusals, key=lambda r: r.kind not in _NOT_POLICIES, reverse=True)
            cached = (imported, {r.name: r.reason for r in reversed(ordered)})
            self._imports[source] = cached
        return cached

    def judge(self, fixture: Fixture) -> Judgement:
        source = (fixture.policy_files, fixture.exceptions)
        imported, refusals = self.policies(source)
        policy = next((p for p in imported if _names(p, fixture.policy)), None)
        if policy is None:
            reason = refusals.get(fixture.policy) or next(iter(refusals.values()), "not imported")
            return Judgement(fixture, None, reason)
        rules = None
        if fixture.rule:  # the rule, and the pod-controller forms Kyverno reports under it
            names = {r.name for r in policy.rules if fixture.rule in (r.name, r.pod_controllers)}
            # a policy without named rules (a ValidatingPolicy, a VAP) is judged whole when a
            # result names a rule it lacks, as Kyverno's CLI judges it
            rules = {policy.name: names} if names else None
        with tempfile.TemporaryDirectory(prefix="assay-corpus-") as folder:
            obj = as_the_api_server_stores(with_namespace(fixture.obj))
            obj = with_defaults(obj) if fixture.defaulted else obj
            (Path(folder) / "object.json").write_text(json.dumps(obj))
            namespaces = [*fixture.namespaces, *_namespaces_they_live_in(obj, fixture)]
            for number, namespace in enumerate(namespaces):  # each labelled with its name
                stored = stored_namespace(namespace)
                (Path(folder) / f"namespace-{number}.json").write_text(json.dumps(stored))
            cluster_scoped = _cluster_scoped_kinds(fixture.context) | {GLOBAL_CONTEXT_KIND}
            for number, other in enumerate(fixture.context):
                if other.get("kind") not in cluster_scoped:
                    other = with_namespace(other)
                other = with_defaults(other) if fixture.defaulted else other
                (Path(folder) / f"context-{number}.json").write_text(json.dumps(other))
            backend = SnapshotBackend(folder)
            began = time.perf_counter()
            results, _ = run_policies([policy], backend, rules=rules)
            seconds = time.perf_counter() - began
            if results[0].verdict != VerdictKind.CANNOT_DETERMINE:
                self._valued.setdefault((source, policy.name), []).append(obj)
        result = results[0]
        if result.verdict == VerdictKind.CANNOT_DETERMINE:
            return Judgement(fixture, None, result.reason or "", seconds)
        if fixture.context or fixture.namespaces:  # the label is the object's, not the others'
            meta = obj.get("metadata") or {}
            fails = any(
                v.kind == obj.get("kind")
                and v.name == meta.get("name")
                and (v.namespace or None) == (meta.get("namespace") or None)
                for v in result.violations
            )
            return Judgement(fixture, not fails, "", seconds, result.judged_total)
        return Judgement(
            fixture, result.verdict == VerdictKind.TRUE, "", seconds, result.judged_total
        )


def _cluster_scoped_kinds(objects: Iterable[dict[str, Any]]) -> set[str]:
    """The custom kinds a CustomResourceDefinition among ``objects`` makes cluster-scoped:
    an object of one written without a namespace stays without one."""
    out = set()
    for obj in objects:
        spec = obj.get("spec") if obj.get("kind") == "CustomResourceDefinition" else None
        if isinstance(spec, dict) and spec.get("scope") == "Cluster":
            names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
            assert isinstance(names, dict)
            if names.get("kind"):
                out.add(str(names["kind"]))
    return out


def _exports(policy: ImportedPolicy, backend: SnapshotBackend) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for fmt in ("vap", "kyverno"):
        takes_params = policy.params is not None or any(r.param_source for r in policy.rules)
        if fmt == "kyverno" and takes_params:
            continue  # a ValidatingPolicy takes no params: vap is its export
        if engine_only(policy, fmt):
            continue  # what only Kyverno has: the export refuses it, and says so
        try:
            export_policy_documents(policy, fmt, backend=backend)
            out[fmt] = None
        except NotExportable as exc:
            out[fmt] = str(exc)
    return out


def engine_only(policy: ImportedPolicy, fmt: str) -> bool:
    """Whether ``policy`` holds what ``fmt`` has no counterpart for: Kyverno's
    PolicyExceptions or GlobalContextEntries (any export), its ``resource`` /
    ``globalContext`` reads and its hash, json and image calls (a ValidatingAdmissionPolicy)."""
    kinds = {d.get("kind") for d in policy.documents[1:]}
    if kinds & _NOT_POLICIES:
        return True
    if fmt != "vap":
        return False
    texts = [text for rule in policy.rules for text in rule.expressions()]
    kyverno_calls = {"parseImageReference", "image", "isImage", "sha1", "sha256", "md5"}
    return any(
        ref.root in ("resource", "globalContext", "hash", "json")
        for text in texts
        for ref in references(text)
    ) or any(global_calls(text) & kyverno_calls for text in texts)


def _names(policy: ImportedPolicy, name: str) -> bool:
    return name in (policy.name, policy.policy_name)


def validates_with_cel(fixture: Fixture) -> bool:
    """Whether the fixture's policy (its rule, for a Kyverno ClusterPolicy) validates with
    CEL: a ValidatingAdmissionPolicy, a Kyverno ValidatingPolicy, a ClusterPolicy rule with
    ``validate.cel``, a Gatekeeper template with K8sNativeValidation code. Fixtures of
    pattern rules, mutating or generating policies test no CEL."""
    rule = fixture.rule
    for prefix in ("autogen-cronjob-", "autogen-"):
        if rule and rule.startswith(prefix):
            rule = rule[len(prefix) :]
            break
    for file in fixture.policy_files:
        for document in _load(Path(file)):
            kind = document.get("kind")
            if kind == "ConstraintTemplate":
                return "K8sNativeValidation" in json.dumps(document)
            if (document.get("metadata") or {}).get("name") != fixture.policy:
                continue
            if kind in _NOT_POLICIES:  # an exception named as the policy it exempts
                continue
            if kind in ("ValidatingAdmissionPolicy", "ValidatingPolicy",
                        "NamespacedValidatingPolicy"):  # fmt: skip
                return True
            if kind in ("ClusterPolicy", "Policy"):
                rules = (document.get("spec") or {}).get("rules") or []
                return any(
                    "cel" in (r.get("validate") or {})
                    for r in rules
                    if rule is None or r.get("name") == rule
                )
            return False
    return False


def evaluate(fixtures: Iterable[Fixture], skipped: Counter[str] | None = None) -> Figures:
    """Judge every fixture whose policy validates with CEL; export every policy that gave a
    value. The other fixtures are counted as left out."""
    judge = Judge()
    skipped = skipped if skipped is not None else Counter()
    chosen = []
    for fixture in fixtures:
        if validates_with_cel(fixture):
            chosen.append(fixture)
        else:
            skipped["a fixture of a policy that does not validate with CEL"] += 1
    judgements = [judge.judge(f) for f in chosen]
    refused = Counter(j.reason for j in judgements if j.value is None)
    exports: dict[str, tuple[int, int]] = {}
    problems: Counter[str] = Counter()
    exported = judge.exports()
    for fmt in ("vap", "kyverno"):
        tried = [outcome[fmt] for outcome in exported.values() if fmt in outcome]
        exports[fmt] = (sum(problem is None for problem in tried), len(tried))
        problems.update(f"{fmt}: {p[:160]}" for p in tried if p is not None)
    return Figures(judgements, refused, exports, problems, skipped)


def iter_disagreements(figures: Figures) -> Iterator[str]:
    for j in figures.disagreements:
        label = "allowed" if j.fixture.allowed else "disallowed"
        said = f"{label}, probe said {j.value}"
        yield f"{j.fixture.source}: {j.fixture.policy} {j.fixture.name}: {said}"


# Each refusal, said in the bench's figures with what it names (first match wins): data a
# stored cluster holds, which assay serves (such a refusal is a gap to close, never a limit
# of judging stored objects); what truly lives in an admission request or outside the
# cluster; what the engine itself could not evaluate either; a written fixture's quirk.
_HELD = "stored cluster holds it (a gap)"
_REQUEST = "lives in the admission request or outside the cluster"
_REFUSAL_CLASSES = (
    ("namespaceObject", f"{_HELD}: namespaceObject"),
    ("labels of namespace", f"{_HELD}: the object's Namespace"),
    ("resource library", f"{_HELD}: Kyverno resource.*"),
    ("(an API call)", f"{_REQUEST}: an API call"),
    ("global context", f"{_HELD}: Kyverno globalContext"),
    ("request.kind", f"{_HELD}: request.kind"),
    ("request.namespace", f"{_HELD}: request.namespace"),
    ("request.name,", f"{_HELD}: request.name"),
    ("judges only UPDATE requests", f"{_REQUEST}: an UPDATE's old object"),
    ("reads oldObject", f"{_HELD}: oldObject, null on a CREATE"),
    ("of Kyverno's exceptions assay serves only", "a read of Kyverno's exceptions assay has not"),
    ("reports the rule as an error", "params the engine errs on too (none found)"),
    ("has none (Kyverno errs on it)", "params the engine errs on too (a cluster-scoped object)"),
    (
        "has none (the API server errs on it)",
        "params the engine errs on too (a cluster-scoped object)",
    ),
    ("request.userInfo", f"{_REQUEST}: request.userInfo"),
    ("http library", f"{_REQUEST}: an HTTP call"),
    ("image.GetMetadata", f"{_REQUEST}: a registry"),
    ("asks the authorizer", f"{_REQUEST}: the authorizer"),
    ("judges only DELETE", f"{_REQUEST}: a DELETE request"),
    ("judges only CONNECT", f"{_REQUEST}: a CONNECT request"),
    ("(who makes the request)", f"{_REQUEST}: who makes the request"),
    ("_?._(null_type", "a null the API server stores as an empty object (a written fixture)"),
    (
        "Key not found in map",
        "a field the written object lacks (the API server's default, or the engine errs too)",
    ),
    ("the expression failed", "the expression errs, in the engine too"),
    ("undeclared reference", "a Kyverno CEL library assay lacks"),
    ("is served by the target", "a kind the fixture's snapshot does not serve"),
    ("matches every resource", "every resource ('*'), which a scan cannot list"),
    ("names no namespace", "a namespaced policy written without its namespace"),
)


def refusal_class(reason: str) -> str:
    """What a refusal names, for the bench's figures: whether a stored cluster holds it
    (and who serves it) or it truly lives outside one."""
    for needle, what in _REFUSAL_CLASSES:
        if needle in reason:
            return what
    return "other"


def disagreement_class(judgement: Judgement) -> str:
    """What may explain a disagreement outside assay: a Kyverno PolicyException among its
    files, which the engine's own test may have run with exceptions switched off (Kyverno's
    ``--enablePolicyException=false``), while assay applies them as a default Kyverno does;
    "" when nothing does (a fidelity bug)."""
    for file in judgement.fixture.policy_files:
        if any(d.get("kind") == "PolicyException" for d in _load(Path(file))):
            return "a PolicyException among its files (the engine may run with them off)"
    return ""
