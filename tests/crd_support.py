"""A CustomResourceDefinition for tests: one served, stored version with its schema."""

from __future__ import annotations

from typing import Any


def custom_resource_definition(
    group: str,
    names: dict[str, Any],
    schema: dict[str, Any],
    *,
    scope: str = "Namespaced",
    version: str = "v1",
) -> dict[str, Any]:
    """The CRD of ``names`` (``kind``, ``plural``, ...) in ``group``, its ``version`` served
    and stored with ``schema`` as its openAPIV3Schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names['plural']}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": names,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
