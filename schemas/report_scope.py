"""What a policy report leaves out by default, kept apart from the sink contract so that
`assay report --help` reads it without building the notifier's pydantic models."""

from __future__ import annotations

# The namespaces Kyverno's default resource filters skip (its Helm chart's
# config.resourceFilters, with excludeKyvernoNamespace for its own namespace): reports leave
# out results about objects there unless a sink or `assay report` says otherwise.
DEFAULT_EXCLUDED_NAMESPACES: tuple[str, ...] = (
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kyverno",
)
