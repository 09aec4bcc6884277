"""What the API's own JSON Schema formats mean, taught to schemathesis (its hooks module).

The published schema marks values only the server can judge with a ``format`` (docs/api.md):
a snapshot folder under the server's snapshot roots, a glob over the contexts of its
kubeconfig, a model name litellm routes, a cron expression, an IANA time zone, the text
of admission policies to import, the YAML of Check and Schedule documents to apply. A fuzzer
that does not know a format draws any string there, and the server rightly refuses most of
them, so "every request the schema calls valid is accepted" could not be checked. These
strategies draw values that do mean what the format says, for the server the fuzz test
starts (its snapshot roots hold the checkout, its kubeconfig the contexts below); every
other part of each request is still drawn from the schema alone.

Loaded by schemathesis through ``SCHEMATHESIS_HOOKS=tests.api_fuzz_formats``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
import yaml
from hypothesis import strategies as st
from schemathesis.core.media_types import YAML_MEDIA_TYPES

CONTEXTS = ("east", "west")
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
  - name: fuzz
    cluster: {server: "https://127.0.0.1:9"}
users:
  - name: fuzz
    user: {token: not-a-real-token}
contexts:
  - name: east
    context: {cluster: fuzz, user: fuzz}
  - name: west
    context: {cluster: fuzz, user: fuzz}
current-context: east
"""

POLICIES = Path(__file__).resolve().parent.parent / "examples" / "policies"
_POLICY_TEXTS = [p.read_text() for p in sorted(POLICIES.glob("*.yaml"))]

schemathesis.openapi.format(
    "snapshot-path",
    st.sampled_from(
        ["examples/snapshots/prod-eu", "examples/snapshots/staging-us", "examples/snapshots/*"]
    ),
)
schemathesis.openapi.format("kubeconfig-context-glob", st.sampled_from(["*", "east", "w*"]))
schemathesis.openapi.format(
    "litellm-model", st.sampled_from(["openai/gpt-4o-mini", "gpt-4o-mini", "openai/local"])
)
schemathesis.openapi.format(
    "cron", st.sampled_from(["*/5 * * * *", "0 2 * * *", "30 1 * * 1-5", "@hourly"])
)
schemathesis.openapi.format(
    "iana-time-zone", st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"])
)
# Each example policy alone, all of them as one stream, and a stream with a document that
# is no policy (answered in `refused`): imports that store policies the stateful phase's
# links then read, export and delete. Each under names of its own (`-N`): a policy belongs
# to one set, so a set import naming a policy another set holds is refused, and with the
# examples' names only the first set imported would ever be stored.
_POLICY_NAMES = ("run-as-non-root", "prod-workloads-labelled", "trusted-registries")


def _renamed(text: str, number: int) -> str:
    for name in _POLICY_NAMES:
        text = text.replace(name, f"{name}-{number}")
    return text


schemathesis.openapi.format(
    "policy-documents",
    st.builds(
        _renamed,
        st.sampled_from(
            [
                *_POLICY_TEXTS,
                "\n---\n".join(_POLICY_TEXTS),
                _POLICY_TEXTS[0] + "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            ]
        ),
        st.integers(min_value=0, max_value=999_999),
    ),
)

# A Check and a Schedule over the example snapshots, together and alone (docs/apply.md).
_CHECK = """apiVersion: assay.dev/v1alpha1
kind: Check
metadata: {name: fuzz-applied-check}
spec:
  predicate: every Deployment in namespace prod has at least 2 ready replicas
  targets: {snapshots: [examples/snapshots/prod-eu]}
"""
_SCHEDULE = """apiVersion: assay.dev/v1alpha1
kind: Schedule
metadata: {name: fuzz-applied-schedule, labels: {team: fuzz}}
spec:
  predicate: no pod in namespace prod runs as root
  targets: {snapshots: ["examples/snapshots/*"]}
  every: 1h
  ceilings: {tokensPerDay: 50000}
"""
schemathesis.openapi.format(
    "apply-documents", st.sampled_from([_CHECK, _SCHEDULE, f"{_CHECK}---\n{_SCHEDULE}"])
)


@schemathesis.deserializer(*YAML_MEDIA_TYPES)
def _yaml_stream(ctx: schemathesis.DeserializationContext, response: Any) -> object:
    """A probe's export is a YAML stream (a policy and its binding); schemathesis' own
    reader takes one document and fails on a second, so read every document."""
    return list(yaml.safe_load_all(response.content))
