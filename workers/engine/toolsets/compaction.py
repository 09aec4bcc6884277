"""What the model reads of an object: the object, with only provable noise left out.

``get`` with a name and ``describe`` show whole objects, and what the model
reads is what it judges by, so a dropped field is a wrong verdict waiting to
happen. In Kubernetes an empty value is often the meaning itself:
``ingress: [{}]`` allows all traffic, ``podSelector: {}`` selects every pod,
a PodDisruptionBudget's ``selector: {}`` covers every pod. So compaction is
safe by construction:

* Only what :data:`DROP_RULES` names is left out, and each rule says why that
  loses nothing: bookkeeping (managedFields, uid, resourceVersion), a value the
  API server fills in by default (``protocol: TCP``), a copy of another field
  (``serviceAccount``), or what Kubernetes adds to every pod, recognised by its
  whole content (the projected service-account token volume), never by a name.
  Rules are scoped to the kinds and paths where the default really applies, so
  ``protocol: TCP`` in a custom resource stays.
* Everything else stays, including every empty mapping, empty list and ``{}``
  list item. A mapping or list is left out only when the rules emptied it.
* Two rules abbreviate instead (a Node's image cache, a CRD's schema) and say
  so in place, so the model knows something is there that it does not see.
* A rule may leave a note: the standard service-account token volume is left
  out, and a comment line at the end of the object says so and names it, so
  "the pod mounts the service-account token" never reads as absent.
* A condition of the usual shape becomes one line (``Ready=True since ...``),
  which reads the same for a fraction of the tokens; one that would not
  survive that (an extra field, an odd value) stays a mapping.

It is deterministic (same object, same text) and never mutates its input.
tests/engine/test_compaction_property.py checks, for generated objects and for every
example snapshot, that each value no rule names comes out unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from schemas.kubernetes_metadata import is_dns1123_label


class _PythonDumper(yaml.SafeDumper):
    """PyYAML's pure-Python dumper, with Unicode line breaks always double-quoted.

    Written raw inside a quoted string, NEL, LS and PS read back as a space; in
    double quotes they become \\N, \\L and \\P and read back as themselves.
    """


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = '"' if _UNICODE_BREAKS & set(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_UNICODE_BREAKS = frozenset("\x85\u2028\u2029")
_PythonDumper.add_representer(str, _represent_str)


# libyaml's dumper when PyYAML was built with it: rendering is on every tool call's path.
_YamlDumper: Any = getattr(yaml, "CSafeDumper", _PythonDumper)
# Never fold long strings: the model quotes lines of this text as evidence.
_NO_WRAP = 1 << 30

Path = tuple[Any, ...]  # keys from the object's root; list positions are ints
Test = Callable[[Any, Mapping[str, Any], Path], bool]  # (value, whole object, its path)

SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
OMITTED_SCHEMA = "(omitted; use explain for the fields)"


# ---------------------------------------------------------------------- the rules


@dataclass(frozen=True)
class Rule:
    """One thing compaction may leave out of an object; ``why`` says why that loses nothing.

    ``pattern`` is matched against the path from the object's root: a key
    name, ``a|b`` (either key), ``*`` (any list position) or ``**`` (any
    number of steps). The rule applies to objects of ``kinds`` (built-in kinds
    in their own API groups; empty means every object) and only when
    ``test(value, object, path)`` holds. ``abbreviate`` turns the rule into an
    in-place note instead of a removal; ``note(value, path)`` keeps the removal and
    says what was removed in a comment after the object (:func:`render_object`).
    """

    pattern: tuple[str, ...]
    why: str
    test: Test
    kinds: frozenset[str] = frozenset()
    abbreviate: Callable[[Any], str] | None = None
    note: Callable[[Any, Path], str] | None = None

    def applies_to(self, kind: Any, group: str | None) -> bool:
        if not self.kinds:
            return True
        return kind in self.kinds and group in BUILTIN_KIND_GROUPS.get(kind, ())


# The API groups each built-in kind lives in (legacy groups included): a rule for
# Deployments must not touch a custom resource that happens to be called Deployment.
BUILTIN_KIND_GROUPS: dict[str, frozenset[str]] = {
    "Pod": frozenset({""}),
    "PodTemplate": frozenset({""}),
    "ReplicationController": frozenset({""}),
    "Service": frozenset({""}),
    "Endpoints": frozenset({""}),
    "Node": frozenset({""}),
    "Deployment": frozenset({"apps", "extensions"}),
    "ReplicaSet": frozenset({"apps", "extensions"}),
    "DaemonSet": frozenset({"apps", "extensions"}),
    "StatefulSet": frozenset({"apps"}),
    "Job": frozenset({"batch"}),
    "CronJob": frozenset({"batch"}),
    "NetworkPolicy": frozenset({"networking.k8s.io", "extensions"}),
    "EndpointSlice": frozenset({"discovery.k8s.io"}),
    "CustomResourceDefinition": frozenset({"apiextensions.k8s.io"}),
}
# Where each kind keeps its pod spec.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (``True`` is not ``1``)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def value_at(obj: Any, path: Iterable[Any]) -> Any:
    """The value at ``path`` in ``obj``, or None when the path is not there."""
    current = obj
    for part in path:
        if isinstance(current, Mapping):
            current = current.get(part)
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
        else:
            return None
    return current


def api_group(obj: Mapping[str, Any]) -> str | None:
    """``apps`` for ``apps/v1``, ``""`` for ``v1``; None when the object does not say."""
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        return None
    return api_version.rpartition("/")[0]


def _always(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    return True


def _equals(default: Any) -> Test:
    def test(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
        return same(value, default)

    return test


# --- content tests


def _observed_generations(obj: Mapping[str, Any]) -> Iterator[Any]:
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return
    if "observedGeneration" in status:
        yield status["observedGeneration"]
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and "observedGeneration" in condition:
            yield condition["observedGeneration"]


def _generations_agree(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    """The status describes the current spec: then the counters say nothing more.

    When they differ (a rollout the controller has not seen yet) they are kept,
    because then they are the answer.
    """
    generation = value_at(obj, ("metadata", "generation"))
    if type(generation) is not int:
        return False
    return all(same(observed, generation) for observed in _observed_generations(obj))


def _is_observed_generation(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    return same(value, value_at(obj, ("metadata", "generation"))) and _generations_agree(
        value, obj, path
    )


def _controller_prefix(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    """``generateName`` that is only the controlling owner's name plus ``-``."""
    owners = value_at(obj, ("metadata", "ownerReferences"))
    return isinstance(value, str) and any(
        isinstance(owner, Mapping)
        and owner.get("controller") is True
        and isinstance(owner.get("name"), str)
        and value == owner["name"] + "-"
        for owner in (owners if isinstance(owners, list) else ())
    )


def _in_object_reference(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    """A ``uid``/``resourceVersion`` inside a reference to another object (kind + name)."""
    parent = value_at(obj, path[:-1]) if len(path) >= 2 else None
    return (
        isinstance(parent, Mapping)
        and isinstance(parent.get("kind"), str)
        and isinstance(parent.get("name"), str)
    )


def _null(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    return value is None


def _same_as_sibling(sibling: str) -> Test:
    def test(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
        parent = value_at(obj, path[:-1])
        return isinstance(parent, Mapping) and sibling in parent and same(value, parent[sibling])

    return test


def _one_item_copy_of(sibling: str, item: Callable[[Any], Any]) -> Test:
    """``podIPs: [{ip: X}]`` next to ``podIP: X``: the list repeats the single value."""

    def test(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
        parent = value_at(obj, path[:-1])
        if not isinstance(parent, Mapping) or not isinstance(parent.get(sibling), str):
            return False
        return same(value, [item(parent[sibling])])

    return test


_DEFAULT_TOLERATION_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _is_default_toleration(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    """The two tolerations the DefaultTolerationSeconds admission plugin adds to every pod."""
    return (
        isinstance(value, Mapping)
        and set(value) == {"key", "operator", "effect", "tolerationSeconds"}
        and value["key"] in _DEFAULT_TOLERATION_KEYS
        and value["operator"] == "Exists"
        and value["effect"] == "NoExecute"
        and same(value["tolerationSeconds"], 300)
    )


_TOKEN_SOURCES = [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {
        "downwardAPI": {
            "items": [
                {
                    "path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                }
            ]
        }
    },
]
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def is_token_volume(volume: Any) -> bool:
    """Exactly the projected token volume the ServiceAccount admission plugin adds to pods."""
    if not isinstance(volume, Mapping) or set(volume) != {"name", "projected"}:
        return False
    name, projected = volume["name"], volume["projected"]
    return (
        isinstance(name, str)
        and name.startswith("kube-api-access-")
        and isinstance(projected, Mapping)
        and set(projected) in ({"sources"}, {"sources", "defaultMode"})
        and same(projected.get("defaultMode", 420), 420)
        and same(projected["sources"], _TOKEN_SOURCES)
    )


def _is_token_mount(mount: Any, name: str, *, in_status: bool = False) -> bool:
    """The read-only mount of the token volume at the service-account path, and nothing else."""
    if not isinstance(mount, Mapping):
        return False
    expected = {"name": name, "mountPath": SERVICE_ACCOUNT_MOUNT, "readOnly": True}
    if in_status and "recursiveReadOnly" in mount:
        expected["recursiveReadOnly"] = "Disabled"
    return same(dict(mount), expected)


def _token_volume_is_noise(pod_spec: Any, name: Any) -> bool:
    """The pod's volume ``name`` is the standard token volume, mounted only the standard way."""
    if not isinstance(pod_spec, Mapping) or not isinstance(name, str):
        return False
    volumes = pod_spec.get("volumes")
    matching = [v for v in (volumes if isinstance(volumes, list) else ()) if _name(v) == name]
    if len(matching) != 1 or not is_token_volume(matching[0]):
        return False
    for list_name in _CONTAINER_LISTS:
        containers = pod_spec.get(list_name)
        for container in containers if isinstance(containers, list) else ():
            mounts = container.get("volumeMounts") if isinstance(container, Mapping) else None
            for mount in mounts if isinstance(mounts, list) else ():
                if _name(mount) == name and not _is_token_mount(mount, name):
                    return False
    return True


def _name(item: Any) -> Any:
    return item.get("name") if isinstance(item, Mapping) else None


def _token_volume(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    return _token_volume_is_noise(value_at(obj, path[:-2]), _name(value))


def _token_mount(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    name = _name(value)
    return _is_token_mount(value, name) and _token_volume_is_noise(value_at(obj, path[:-4]), name)


def _token_mount_in_status(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    name = _name(value)
    return _is_token_mount(value, name, in_status=True) and _token_volume_is_noise(
        obj.get("spec"), name
    )


def _token_volume_note(volume: Any, path: Path) -> str:
    """One comment line: a name that is not a plain volume name is not written into it."""
    where = ".".join(str(step) for step in path[:-1])
    name = _name(volume)
    shown = name if is_dns1123_label(name) else "a kube-api-access-* volume"
    return (
        f"{where}: left out {shown}, the standard service-account token volume "
        f"(token, kube-root-ca.crt, namespace), mounted read-only at {SERVICE_ACCOUNT_MOUNT}: "
        "the pod mounts the service-account token"
    )


def _non_empty_list(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    return isinstance(value, list) and bool(value)


def _mapping(value: Any, obj: Mapping[str, Any], path: Path) -> bool:
    return isinstance(value, Mapping)


# --- the list

_CONTAINERS = "|".join(_CONTAINER_LISTS)
_PROBES = "livenessProbe|readinessProbe|startupProbe"
_CONTAINER_STATUSES = "containerStatuses|initContainerStatuses|ephemeralContainerStatuses"
_DEFAULTED = "the API server's default"

# Rules for any pod spec, relative to where the kind keeps it (POD_SPEC_PATHS).
_POD_SPEC_RULES: tuple[tuple[tuple[str, ...], str, Test], ...] = (
    (("schedulerName",), _DEFAULTED, _equals("default-scheduler")),
    (("dnsPolicy",), _DEFAULTED, _equals("ClusterFirst")),
    (("enableServiceLinks",), _DEFAULTED, _equals(True)),
    (("preemptionPolicy",), _DEFAULTED, _equals("PreemptLowerPriority")),
    (("priority",), "the priority of a pod with no priority class", _equals(0)),
    (("terminationGracePeriodSeconds",), _DEFAULTED, _equals(30)),
    (("securityContext",), "the API server fills in an empty one", _equals({})),
    (
        ("serviceAccount",),
        "the deprecated copy of serviceAccountName",
        _same_as_sibling("serviceAccountName"),
    ),
    (
        ("tolerations", "*"),
        "added to every pod by the DefaultTolerationSeconds admission plugin",
        _is_default_toleration,
    ),
    (
        ("volumes", "*"),
        "the service-account token volume added to every pod (recognised by its content)",
        _token_volume,
    ),
    (
        (_CONTAINERS, "*", "volumeMounts", "*"),
        "the standard mount of that token volume",
        _token_mount,
    ),
    ((_CONTAINERS, "*", "terminationMessagePath"), _DEFAULTED, _equals("/dev/termination-log")),
    ((_CONTAINERS, "*", "terminationMessagePolicy"), _DEFAULTED, _equals("File")),
    ((_CONTAINERS, "*", "resources"), "no requests or limits, written as {}", _equals({})),
    ((_CONTAINERS, "*", "ports", "*", "protocol"), _DEFAULTED, _equals("TCP")),
    ((_CONTAINERS, "*", _PROBES, "failureThreshold"), _DEFAULTED, _equals(3)),
    ((_CONTAINERS, "*", _PROBES, "successThreshold"), _DEFAULTED, _equals(1)),
    ((_CONTAINERS, "*", _PROBES, "timeoutSeconds"), _DEFAULTED, _equals(1)),
    ((_CONTAINERS, "*", _PROBES, "periodSeconds"), _DEFAULTED, _equals(10)),
    ((_CONTAINERS, "*", _PROBES, "httpGet", "scheme"), _DEFAULTED, _equals("HTTP")),
)


def _rule(
    pattern: tuple[str, ...],
    why: str,
    test: Test = _always,
    kinds: Iterable[str] = (),
    abbreviate: Callable[[Any], str] | None = None,
    note: Callable[[Any, Path], str] | None = None,
) -> Rule:
    return Rule(pattern, why, test, frozenset(kinds), abbreviate, note)


def _cached_images(images: Any) -> str:
    return f"(omitted: {len(images)} container images cached on this node)"


DROP_RULES: tuple[Rule, ...] = (
    # bookkeeping of every object
    _rule(("metadata", "managedFields"), "which client wrote which field: bookkeeping"),
    _rule(("metadata", "uid"), "the object's identity: bookkeeping"),
    _rule(("metadata", "resourceVersion"), "the storage version: bookkeeping"),
    _rule(("metadata", "selfLink"), "the object's own URL: bookkeeping"),
    _rule(
        ("metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration"),
        "a copy of the object as last applied",
    ),
    _rule(
        ("metadata", "labels|annotations"),
        "an empty map, which the API server never stores (absent and empty are the same)",
        _equals({}),
    ),
    _rule(
        ("metadata", "generation"),
        "a change counter, dropped only when the status has seen the current one",
        _generations_agree,
    ),
    _rule(
        ("status", "observedGeneration"),
        "equal to metadata.generation",
        _is_observed_generation,
    ),
    _rule(
        ("status", "conditions", "*", "observedGeneration"),
        "equal to metadata.generation",
        _is_observed_generation,
    ),
    _rule(
        ("metadata", "generateName"),
        "the controlling owner's name plus '-'",
        _controller_prefix,
    ),
    _rule(
        ("metadata", "ownerReferences", "*", "blockOwnerDeletion"),
        "a hint to the garbage collector, not state of the object",
    ),
    _rule(
        ("**", "uid|resourceVersion"),
        "the identity and storage version of a referenced object: bookkeeping",
        _in_object_reference,
    ),
    _rule(
        ("**", "metadata", "creationTimestamp"),
        "an unset timestamp, written as null in templates",
        _null,
    ),
    _rule(
        ("status", "conditions", "*", "lastProbeTime|lastHeartbeatTime|lastUpdateTime"),
        "when the condition was last checked, not when it changed (lastTransitionTime stays)",
    ),
    # pods
    *(
        _rule(
            (*where, *pattern),
            why,
            test,
            kinds=[kind],
            note=_token_volume_note if test is _token_volume else None,
        )
        for kind, where in POD_SPEC_PATHS.items()
        for pattern, why, test in _POD_SPEC_RULES
    ),
    _rule(
        ("status", "podIPs"),
        "repeats podIP",
        _one_item_copy_of("podIP", lambda ip: {"ip": ip}),
        kinds=["Pod"],
    ),
    _rule(
        ("status", "hostIPs"),
        "repeats hostIP",
        _one_item_copy_of("hostIP", lambda ip: {"ip": ip}),
        kinds=["Pod"],
    ),
    _rule(
        ("status", _CONTAINER_STATUSES, "*", "containerID"),
        "the container runtime's id: bookkeeping",
        kinds=["Pod"],
    ),
    _rule(
        ("status", _CONTAINER_STATUSES, "*", "volumeMounts", "*"),
        "the standard mount of the service-account token volume",
        _token_mount_in_status,
        kinds=["Pod"],
    ),
    # workloads
    _rule(
        ("metadata", "annotations", "deployment.kubernetes.io/desired-replicas"),
        "the Deployment's replicas, copied by its controller",
        kinds=["ReplicaSet"],
    ),
    _rule(
        ("metadata", "annotations", "deployment.kubernetes.io/max-replicas"),
        "derived from the Deployment's replicas and maxSurge by its controller",
        kinds=["ReplicaSet"],
    ),
    _rule(("spec", "progressDeadlineSeconds"), _DEFAULTED, _equals(600), kinds=["Deployment"]),
    _rule(
        ("spec", "revisionHistoryLimit"),
        _DEFAULTED,
        _equals(10),
        kinds=["Deployment", "StatefulSet", "DaemonSet"],
    ),
    # services and traffic
    _rule(("spec", "sessionAffinity"), _DEFAULTED, _equals("None"), kinds=["Service"]),
    _rule(("spec", "internalTrafficPolicy"), _DEFAULTED, _equals("Cluster"), kinds=["Service"]),
    _rule(("spec", "ipFamilyPolicy"), _DEFAULTED, _equals("SingleStack"), kinds=["Service"]),
    _rule(
        ("spec", "clusterIPs"),
        "repeats clusterIP",
        _one_item_copy_of("clusterIP", str),
        kinds=["Service"],
    ),
    _rule(("spec", "ports", "*", "protocol"), _DEFAULTED, _equals("TCP"), kinds=["Service"]),
    _rule(
        ("status", "loadBalancer"),
        "no load balancer, written as {}",
        _equals({}),
        kinds=["Service"],
    ),
    _rule(
        ("spec", "ingress|egress", "*", "ports", "*", "protocol"),
        _DEFAULTED,
        _equals("TCP"),
        kinds=["NetworkPolicy"],
    ),
    _rule(
        ("subsets", "*", "ports", "*", "protocol"), _DEFAULTED, _equals("TCP"), kinds=["Endpoints"]
    ),
    _rule(("ports", "*", "protocol"), _DEFAULTED, _equals("TCP"), kinds=["EndpointSlice"]),
    # nodes and CRDs: abbreviated in place, not dropped
    _rule(
        ("status", "images"),
        "the node's image cache: long, and not the state of any workload",
        _non_empty_list,
        kinds=["Node"],
        abbreviate=_cached_images,
    ),
    _rule(
        ("status", "nodeInfo", "bootID|machineID|systemUUID"),
        "the machine's identity: bookkeeping",
        kinds=["Node"],
    ),
    _rule(
        ("spec", "versions", "*", "schema"),
        "the schema: the explain tool shows it field by field",
        _mapping,
        kinds=["CustomResourceDefinition"],
        abbreviate=lambda schema: OMITTED_SCHEMA,
    ),
    _rule(
        ("spec", "validation"),
        "the schema: the explain tool shows it field by field",
        _mapping,
        kinds=["CustomResourceDefinition"],
        abbreviate=lambda schema: OMITTED_SCHEMA,
    ),
)


# ---------------------------------------------------------------------- matching

_Step = frozenset[str] | str  # alternatives, or "*" / "**"


def _compile(pattern: tuple[str, ...]) -> tuple[_Step, ...]:
    return tuple(step if step in ("*", "**") else frozenset(step.split("|")) for step in pattern)


def _matches(steps: tuple[_Step, ...], path: Path) -> bool:
    if not steps:
        return not path
    head, rest = steps[0], steps[1:]
    if head == "**":
        return any(_matches(rest, path[start:]) for start in range(len(path) + 1))
    if not path:
        return False
    if head == "*":
        ok = isinstance(path[0], int) and not isinstance(path[0], bool)
    else:
        ok = isinstance(path[0], str) and path[0] in head
    return ok and _matches(rest, path[1:])


class _RuleIndex:
    """The rules for one kind, indexed by the last step of their pattern (keeps walks cheap)."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self._by_key: dict[str, list[tuple[tuple[_Step, ...], Rule]]] = {}
        self._by_list: dict[str, list[tuple[tuple[_Step, ...], Rule]]] = {}
        for rule in rules:
            steps = _compile(rule.pattern)
            last = steps[-1]
            if last == "**" or (last == "*" and (len(steps) < 2 or steps[-2] in ("*", "**"))):
                raise ValueError(f"rule pattern {rule.pattern} must end in a key or key.*")
            if last == "*":
                for key in steps[-2]:
                    self._by_list.setdefault(key, []).append((steps, rule))
            else:
                for key in last:
                    self._by_key.setdefault(key, []).append((steps, rule))

    def rule_for(self, value: Any, obj: Mapping[str, Any], path: Path) -> Rule | None:
        last = path[-1]
        if isinstance(last, int) and not isinstance(last, bool):
            parent = path[-2] if len(path) >= 2 else None
            candidates = self._by_list.get(parent, ()) if isinstance(parent, str) else ()
        else:
            candidates = self._by_key.get(last, ()) if isinstance(last, str) else ()
        for steps, rule in candidates:
            if _matches(steps, path) and rule.test(value, obj, path):
                return rule
        return None


@lru_cache(maxsize=256)
def _index_for(kind: str | None, group: str | None) -> _RuleIndex:
    return _RuleIndex(rule for rule in DROP_RULES if rule.applies_to(kind, group))


# ---------------------------------------------------------------------- compaction

_EMPTIED = object()  # a mapping or list the rules emptied: left out


def _walk(
    value: Any, path: Path, obj: Mapping[str, Any], index: _RuleIndex, notes: list[str]
) -> Any:
    if isinstance(value, Mapping):
        kept: dict[Any, Any] = {}
        for key, child in value.items():
            result = _child(child, (*path, key), obj, index, notes)
            if result is not _EMPTIED:
                kept[key] = result
        return _EMPTIED if value and not kept else kept
    if isinstance(value, list):
        items = [
            _child(item, (*path, position), obj, index, notes)
            for position, item in enumerate(value)
        ]
        kept_items = [item for item in items if item is not _EMPTIED]
        return _EMPTIED if value and not kept_items else kept_items
    return value


def _child(
    value: Any, path: Path, obj: Mapping[str, Any], index: _RuleIndex, notes: list[str]
) -> Any:
    rule = index.rule_for(value, obj, path)
    if rule is None:
        return _walk(value, path, obj, index, notes)
    if rule.note is not None:
        notes.append(rule.note(value, path))
    return _EMPTIED if rule.abbreviate is None else rule.abbreviate(value)


_CONDITION_KEYS = frozenset({"type", "status", "lastTransitionTime", "reason", "message"})
_CONDITION_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_CONDITION_STATUS = re.compile(r"[A-Za-z0-9._-]+")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
_REASON = re.compile(r"[^()]+")
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _fits_one_line(condition: Mapping[str, Any]) -> bool:
    """Only conditions whose line can be read back exactly become one (see condition_line)."""
    if not (set(condition) <= _CONDITION_KEYS and {"type", "status"} <= set(condition)):
        return False
    values = list(condition.values())
    if not all(type(value) is str and not _LINE_BREAKS & set(value) for value in values):
        return False
    message = condition.get("message")
    return (
        _CONDITION_TYPE.fullmatch(condition["type"]) is not None
        and _CONDITION_STATUS.fullmatch(condition["status"]) is not None
        and (
            "lastTransitionTime" not in condition
            or bool(_TIMESTAMP.fullmatch(condition["lastTransitionTime"]))
        )
        and ("reason" not in condition or bool(_REASON.fullmatch(condition["reason"])))
        and message != ""
    )


def condition_line(condition: Mapping[str, Any]) -> str:
    """``Ready=False since 2026-03-10T08:41:07Z (ContainersNotReady): containers ...``.

    A condition is five or six YAML lines; as one line it reads the same to the
    model for a fraction of the tokens. The message is kept verbatim.
    """
    line = f"{condition['type']}={condition['status']}"
    if "lastTransitionTime" in condition:
        line += f" since {condition['lastTransitionTime']}"
    if "reason" in condition:
        line += f" ({condition['reason']})"
    if "message" in condition:
        line += f": {condition['message']}"
    return line


def compact_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A new copy of ``obj`` without what :data:`DROP_RULES` names; everything else as it was."""
    return _compacted(obj)[0]


def _compacted(obj: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The compact copy, and the notes of the rules that left something out."""
    kind = obj.get("kind")
    index = _index_for(kind if isinstance(kind, str) else None, api_group(obj))
    notes: list[str] = []
    result = _walk(obj, (), obj, index, notes)
    if result is _EMPTIED:
        return {}, notes
    status = result.get("status")
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        status["conditions"] = [
            condition_line(c) if isinstance(c, dict) and _fits_one_line(c) else c
            for c in status["conditions"]
        ]
    return dict(result), notes


def render_object(obj: Mapping[str, Any]) -> str:
    """One object as compact YAML (``key: value`` lines), in the API's own key order, then
    a comment line for each rule note (what was left out that the model must not miss)."""
    compact, notes = _compacted(obj)
    text = _dump(compact, _YamlDumper)
    if "\\U" in text and _YamlDumper is not _PythonDumper:
        # libyaml escapes characters beyond the BMP (emoji) as \UXXXXXXXX; the pure
        # Python dumper writes them as they are, so the model reads the real text.
        text = _dump(compact, _PythonDumper)
    return text + "".join(f"# {note}\n" for note in dict.fromkeys(notes))


def _dump(data: Any, dumper: Any) -> str:
    return yaml.dump(
        data,
        Dumper=dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_NO_WRAP,
    )
