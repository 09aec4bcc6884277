"""Evaluating Kyverno's libraries as an imported Kyverno ValidatingPolicy's run does: they
answer only inside one (kyverno_resource.reading binds it), so each test binds a run that
reads no other objects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tests.policy_engine.cel.lib.support import fails, value
from workers.policy_engine.cel.lib.base import CelLibraryError
from workers.policy_engine.cel.lib.kyverno_resource import reading


class NoObjects:
    """A cluster with nothing to read: only the pure libraries are called in these tests."""

    namespace: str | None = None

    def get(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        raise CelLibraryError("no objects in this test")

    def list(
        self, api_version: str, resource: str, namespace: str, labels: dict[str, str]
    ) -> dict[str, Any]:
        raise CelLibraryError("no objects in this test")

    def global_context(self, name: str, projection: str) -> Any:
        return None


@contextmanager
def in_kyverno_policy() -> Iterator[None]:
    with reading(NoObjects()):
        yield


def kyverno_value(expression: str, data: Mapping[str, Any] | None = None) -> Any:
    """The expression's value as a Kyverno ValidatingPolicy's run computes it."""
    with in_kyverno_policy():
        return value(expression, data)


def kyverno_fails(
    expression: str, data: Mapping[str, Any] | None = None, match: str | None = None
) -> None:
    """Inside a Kyverno ValidatingPolicy's run the expression does not compile or gives an
    error (never a value)."""
    with in_kyverno_policy():
        fails(expression, data, match=match)
