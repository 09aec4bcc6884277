"""A kubeconfig for tests that name contexts but never reach a cluster: every context points
at one server nobody listens on, with a token that is no secret."""

from __future__ import annotations

import yaml


def kubeconfig_text(*contexts: str, server: str = "https://127.0.0.1:9") -> str:
    """A kubeconfig whose contexts are ``contexts`` (the first is current), all on ``server``."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": server}}],
            "users": [{"name": "test", "user": {"token": "not-a-real-token"}}],
            "contexts": [
                {"name": name, "context": {"cluster": "test", "user": "test"}} for name in contexts
            ],
            "current-context": contexts[0],
        },
        sort_keys=False,
    )
