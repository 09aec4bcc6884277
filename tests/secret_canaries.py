"""A cluster snapshot with Secret values planted where a careless toolset would show them.

:func:`write_canary_cluster` writes a snapshot folder (serve it as it is, or
through ``FakeApiServer`` for the live backend) in which every canary is a
fresh random string. Each :class:`Canary` says where it was planted and
which strings would betray it (the value, its base64 and base64url forms),
so a test can search any text (prompts, reports, logs, API bodies) with
:meth:`CanaryCluster.leaks`.

Two families:

* **Secret values** (``needs_secret_values=True``): held in a Secret and
  copied elsewhere: a pod env literal, a ConfigMap, an event message, the
  current and previous pod log, a custom resource; the base64 form of a
  ``stringData`` value; one line of a multi-line PEM value; a Secret's own
  annotation under a credential key; a ConfigMap data *key* that is a copy of a
  Secret value. Only a scrubber that has read the Secrets can recognise a plain
  copy, so with Secrets unreadable (the live backend under the recommended
  RBAC) these are out of reach by design.
* **Credential-shaped values** (``needs_secret_values=False``): in no Secret
  at all, but shaped like a credential: a DSN password (in a value, and in a
  ConfigMap data key), a ``key=value`` token, a bearer token, a PEM private key
  block, and well-known provider tokens standing alone in pod log lines (a
  GitHub token in a clone URL, an AWS access key id, an OpenAI project key after
  a variable name without ``=``). Patterns must catch these whatever the backend
  may read.

A Secret's labels are identifiers, not values (a Helm release Secret's ``name``
label is the release, repeated in every workload's name): the ``signing-key``
Secret's label :data:`SECRET_LABEL` is copied into a custom resource and must be
served unchanged wherever it appears.

The content is this project's own; nothing here is a real credential.
"""

from __future__ import annotations

import base64
import json
import secrets
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NAMESPACE = "shop"
POD = "checkout-0"
CONTAINER = "app"
SECRET_LABEL = ("vendor.example.com/account", "shop-payments-eu")
"""A label of a Secret (key, value): an identifier, shown wherever it appears."""


@dataclass(frozen=True)
class Canary:
    label: str
    value: str
    needs_secret_values: bool

    @property
    def forms(self) -> tuple[str, ...]:
        """The strings whose presence anywhere means this canary leaked."""
        raw = self.value.encode()
        encoded = base64.b64encode(raw).decode()
        urlsafe = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        return tuple(dict.fromkeys((self.value, encoded, encoded.rstrip("="), urlsafe)))


@dataclass(frozen=True)
class CanaryCluster:
    path: Path
    canaries: tuple[Canary, ...]

    def leaks(self, text: str, *, secrets_readable: bool = True) -> list[str]:
        """Labels of the canaries in ``text`` (only the pattern-catchable ones if not readable)."""
        return [
            canary.label
            for canary in self.canaries
            if (secrets_readable or not canary.needs_secret_values)
            and any(form in text for form in canary.forms)
        ]

    def canary(self, label: str) -> Canary:
        return next(c for c in self.canaries if c.label == label)


def _token(label: str) -> str:
    return f"cnry{label.replace('-', '')[:8]}{secrets.token_hex(10)}"


_BASE62 = string.ascii_letters + string.digits


def _random(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _github_token() -> str:
    """A made-up classic GitHub token: ``ghp_`` and 36 base62 (both cases, whatever the draw)."""
    return "ghp_Cn" + _random(_BASE62, 34)


def _aws_key_id() -> str:
    """A made-up AWS access key id: ``AKIA`` and 16 upper-case letters and digits."""
    return "AKIA" + _random(string.ascii_uppercase + string.digits, 16)


def _openai_key() -> str:
    """A made-up OpenAI project key (``sk-proj-``, long base64url, ``T3BlbkFJ`` inside)."""
    urlsafe = _BASE62 + "_-"
    return f"sk-proj-{_random(urlsafe, 60)}T3BlbkFJ{_random(urlsafe, 60)}"


PROVIDER_TOKEN_LABELS = frozenset({"github-token", "aws-key-id", "openai-key"})
"""Canaries that are provider tokens standing alone: only their own shape betrays them."""


def _pem_body_line() -> str:
    """A 64-character line as in a PEM body (random base64), unique to this run."""
    return base64.b64encode(secrets.token_bytes(48)).decode()


def _pem(label: str, lines: list[str]) -> str:
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_canary_cluster(root: Path, name: str = "canary") -> CanaryCluster:
    """Write the snapshot folder ``root/name``; returns it with its canaries."""
    folder = root / name
    folder.mkdir(parents=True)
    env_password = Canary("pod-env-literal", _token("envlit"), True)
    string_data_token = Canary("stringData-base64", _token("strdata"), True)
    pem_line = Canary("pem-line", _pem_body_line(), True)
    annotation = Canary("secret-annotation", _token("annot"), True)
    event_copy = Canary("event-message", _token("event"), True)
    log_copy = Canary("pod-log", _token("log"), True)
    previous_log_copy = Canary("previous-pod-log", _token("prevlog"), True)
    configmap_copy = Canary("configmap", _token("cm"), True)
    custom_resource_copy = Canary("custom-resource", _token("cr"), True)
    key_copy = Canary("configmap-key", _token("cmkey"), True)
    dsn_in_secret = Canary("dsn-password-in-secret", _token("dsnsec"), False)
    dsn_free = Canary("dsn-password", _token("dsn"), False)
    dsn_key = Canary("dsn-password-in-key", _token("dsnkey"), False)
    flag = Canary("cli-flag", _token("flag"), False)
    key_value = Canary("key-value-token", _token("kv"), False)
    bearer = Canary("bearer-token", _token("bearer"), False)
    unknown_pem_line = Canary("pem-private-key-block", _pem_body_line(), False)
    github_token = Canary("github-token", _github_token(), False)
    aws_key_id = Canary("aws-key-id", _aws_key_id(), False)
    openai_key = Canary("openai-key", _openai_key(), False)

    pem_lines = [_pem_body_line(), pem_line.value, _pem_body_line()]
    secret_objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db-credentials", "namespace": NAMESPACE},
            "type": "Opaque",
            "data": {
                "password": _b64(env_password.value),
                "url": _b64(f"postgres://shop:{dsn_in_secret.value}@db.shop:5432/shop"),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "seeds", "namespace": NAMESPACE},
            "type": "Opaque",
            "data": {
                copy.label: _b64(copy.value)
                for copy in (
                    event_copy,
                    log_copy,
                    previous_log_copy,
                    configmap_copy,
                    custom_resource_copy,
                    key_copy,
                )
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "api-keys", "namespace": NAMESPACE},
            "type": "Opaque",
            "stringData": {"token": string_data_token.value},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "signing-key",
                "namespace": NAMESPACE,
                "annotations": {
                    "vendor.example.com/api-token": annotation.value,
                    "kubernetes.io/service-account.name": "signer",
                },
                "labels": {SECRET_LABEL[0]: SECRET_LABEL[1], "app": "signer"},
            },
            "type": "kubernetes.io/tls",
            "data": {
                "tls.key": _b64(_pem("RSA PRIVATE KEY", pem_lines)),
                "tls.crt": _b64(_pem("CERTIFICATE", [_pem_body_line()])),
            },
        },
    ]
    for secret in secret_objects:  # as `kubectl apply` leaves it: the manifest in an annotation
        metadata = secret["metadata"]
        metadata.setdefault("annotations", {})[
            "kubectl.kubernetes.io/last-applied-configuration"
        ] = json.dumps(secret)

    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *secret_objects,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, "namespace": NAMESPACE, "labels": {"app": "checkout"}},
            "spec": {
                "nodeName": "node-1",
                "containers": [
                    {
                        "name": CONTAINER,
                        "image": "example/checkout:1.4",
                        "args": ["--listen=:8080", "--db-password", flag.value],
                        "env": [
                            {"name": "CHECKOUT_DB_PASSWORD", "value": env_password.value},
                            {"name": "FEATURE_SEED", "value": env_password.value},
                            {
                                "name": "DATABASE_URL",
                                "value": f"postgres://shop:{dsn_in_secret.value}@db.shop/shop",
                            },
                            {
                                "name": "API_TOKEN",
                                "valueFrom": {"secretKeyRef": {"name": "api-keys", "key": "token"}},
                            },
                        ],
                    }
                ],
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": CONTAINER, "ready": True, "restartCount": 1, "image": "x"}
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "app-config", "namespace": NAMESPACE},
            "data": {
                "notes": f"fallback seed {configmap_copy.value}",
                "cached-token": _b64(string_data_token.value),
                "signing-key-fragment": f"first part\n{pem_line.value}\nrest",
                key_copy.value: "a Secret's value as a key",
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "legacy", "namespace": NAMESPACE},
            "data": {
                "app.properties": f"mode=fast\ndb.password={key_value.value}\nretries=3\n",
                "DATABASE_URL": f"mysql://root:{dsn_free.value}@mysql.shop:3306/shop",
                f"postgres://report:{dsn_key.value}@replica.shop:5432/shop": "read replica",
                "key.pem": _pem(
                    "EC PRIVATE KEY", [_pem_body_line(), unknown_pem_line.value, "AAAA"]
                ),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{POD}.1", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Pod", "name": POD, "namespace": NAMESPACE},
            "reason": "Rotated",
            "type": "Normal",
            "message": f"credentials rotated to {event_copy.value} (vendor {annotation.value})",
            "lastTimestamp": "2025-01-01T00:05:00Z",
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "backups.ops.example.com"},
            "spec": {
                "group": "ops.example.com",
                "scope": "Namespaced",
                "names": {"kind": "Backup", "plural": "backups", "singular": "backup"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object"}},
                    }
                ],
            },
        },
        {
            "apiVersion": "ops.example.com/v1",
            "kind": "Backup",
            "metadata": {"name": "nightly", "namespace": NAMESPACE},
            "spec": {
                "schedule": "0 2 * * *",
                "comment": f"restore with {custom_resource_copy.value}",
                "vendorAccount": SECRET_LABEL[1],
                "encryptionKeyEcho": base64.urlsafe_b64encode(string_data_token.value.encode())
                .decode()
                .rstrip("="),
            },
            "status": {"lastRun": "2025-01-01T02:00:00Z"},
        },
    ]
    (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    logs = folder / "logs" / NAMESPACE / POD
    logs.mkdir(parents=True)
    (logs / f"{CONTAINER}.log").write_text(
        f"2025-01-01T00:00:00Z starting with seed {log_copy.value}\n"
        f"2025-01-01T00:00:01Z POST /login Authorization: Bearer {bearer.value}\n"
        f"2025-01-01T00:00:01Z cloning https://{github_token.value}@github.com/shop/checkout\n"
        f"2025-01-01T00:00:01Z uploading receipts to s3 as {aws_key_id.value}\n"
        "2025-01-01T00:00:02Z ready\n",
        encoding="utf-8",
    )
    (logs / f"{CONTAINER}.previous.log").write_text(
        f"loaded key line {pem_line.value}\nseed was {previous_log_copy.value}\n"
        f"export OPENAI_KEY {openai_key.value}\npanic: boom\n",
        encoding="utf-8",
    )
    canaries = (
        env_password,
        string_data_token,
        pem_line,
        annotation,
        event_copy,
        log_copy,
        previous_log_copy,
        configmap_copy,
        custom_resource_copy,
        key_copy,
        dsn_in_secret,
        dsn_free,
        dsn_key,
        flag,
        key_value,
        bearer,
        unknown_pem_line,
        github_token,
        aws_key_id,
        openai_key,
    )
    return CanaryCluster(folder, canaries)


def spoken(canary: Canary) -> str:
    """How a model repeats a canary: a Secret's value bare (a run's scrubber knows it); a
    value held in no Secret in a credential shape, as it read it (only the shape betrays it);
    a provider token bare (its own shape is all there is)."""
    if canary.needs_secret_values or canary.label in PROVIDER_TOKEN_LABELS:
        return canary.value
    if canary.label == "pem-private-key-block":
        return f"-----BEGIN EC PRIVATE KEY-----\n{canary.value}\n-----END EC PRIVATE KEY-----"
    if canary.label == "bearer-token":
        return f"Authorization: Bearer {canary.value}"
    return f"postgres://shop:{canary.value}@db.shop:5432/shop"


def sweep_calls() -> list[tuple[str, dict[str, Any]]]:
    """Every lookup a curious model could make of the canary cluster."""
    calls: list[tuple[str, dict[str, Any]]] = [("events", {}), ("api_resources", {})]
    for kind, name in (
        ("Secret", "db-credentials"),
        ("Secret", "api-keys"),
        ("Secret", "signing-key"),
        ("Secret", "seeds"),
        ("Pod", POD),
        ("ConfigMap", "app-config"),
        ("ConfigMap", "legacy"),
        ("Backup", "nightly"),
    ):
        target = {"kind": kind, "name": name, "namespace": NAMESPACE}
        calls += [("get", target), ("describe", target), ("get", {"kind": kind})]
    calls += [
        ("events", {"namespace": NAMESPACE, "involved_kind": "Pod", "involved_name": POD}),
        ("explain", {"kind": "Backup"}),
        ("logs", {"namespace": NAMESPACE, "pod": POD}),
        ("logs", {"namespace": NAMESPACE, "pod": POD, "previous": True}),
    ]
    return calls
