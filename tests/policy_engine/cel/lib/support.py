"""Shared helpers of the per-library tests: evaluate an expression in the probe environment
(environment.PROBE_VERSION unless a test names another stated version)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from workers.policy_engine.cel.environment import PROBE_VERSION
from workers.policy_engine.cel.programs import CelError, Expression


def value(
    expression: str, data: Mapping[str, Any] | None = None, version: str = PROBE_VERSION
) -> Any:
    """The expression's value over ``data`` (``object`` bound to it when it is an object)."""
    return Expression(expression, version=version).evaluate(dict(data or {}))


def holds(
    expression: str, data: Mapping[str, Any] | None = None, version: str = PROBE_VERSION
) -> None:
    """The expression is exactly ``true``."""
    assert value(expression, data, version) is True, expression


def fails(
    expression: str,
    data: Mapping[str, Any] | None = None,
    match: str | None = None,
    version: str = PROBE_VERSION,
) -> None:
    """The expression does not compile or gives an error (never a value)."""
    with pytest.raises(CelError, match=match):
        value(expression, data, version)
