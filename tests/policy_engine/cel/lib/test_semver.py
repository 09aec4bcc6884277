"""Kubernetes' semver library (1.33+, version 1), against its documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds

TRUE = [
    "isSemver('1.0.0') && isSemver('0.1.0-alpha.1') && !isSemver('hello')",
    "!isSemver('v1.0') && isSemver('v1.0', true)",  # a leading v only when normalising
    "semver('v1.0.0', true) == semver('1.0.0')",
    "semver('1.0', true) == semver('1.0.0')",  # the missing patch added
    "semver('01.01.01', true) == semver('1.1.1')",  # leading zeros removed
    "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3",
    "semver('1.2.3').compareTo(semver('1.2.3')) == 0",
    "semver('1.2.3').compareTo(semver('2.0.0')) == -1",
    "semver('1.2.3').compareTo(semver('0.1.2')) == 1",
    "semver('1.2.3').isLessThan(semver('1.10.0')) && "
    "semver('1.10.0').isGreaterThan(semver('1.2.3'))",
    "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))",  # a pre-release ranks below its release
    "semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10'))",  # numeric identifiers
    "semver('1.0.0+build.5') == semver('1.0.0')",  # build metadata does not count
]
ERRORS = [
    ("semver('200K')", "invalid semver"),
    ("semver('Three')", "invalid semver"),
    ("semver('Mi')", "invalid semver"),
    ("semver('1.2')", "invalid semver"),  # not without normalising
    ("semver('01.2.3')", "invalid semver"),  # leading zeros
    ("semver('1.0-rc1', true)", "pre-release"),  # a short version has no pre-release
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, match=reason)
