"""Kyverno's hash library (sha1, sha256, md5 of a string, lower-case hex; ``hash.`` names
from Kyverno 1.18), against the algorithms' published test vectors and Kyverno's own
conformance case; only inside a Kyverno ValidatingPolicy."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.kyverno_support import in_kyverno_policy
from tests.policy_engine.cel.lib.support import fails, value
from workers.policy_engine.cel.programs import CelError, Expression, StepMeter

CASES = [
    # FIPS 180 / RFC 1321 vectors for "abc"
    ("sha1('abc')", "a9993e364706816aba3e25717850c26c9cd0d89d"),
    ("hash.sha1('abc')", "a9993e364706816aba3e25717850c26c9cd0d89d"),
    ("sha256('abc')", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ("hash.sha256('abc')", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ("md5('abc')", "900150983cd24fb0d6963f7d28e17f72"),
    ("hash.md5('')", "d41d8cd98f00b204e9800998ecf8427e"),
    # Kyverno's conformance case: an image's md5, as its policy expects it
    ("hash.md5('public.ecr.aws/docker/library/nginx:latest')",
     "48729939c9129e8aa42540ba4b5e6100"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "expected"), CASES)
def test_digests_are_the_documented_hex(expression: str, expected: str) -> None:
    with in_kyverno_policy():
        assert value(expression) == expected


def test_only_a_string_is_hashed() -> None:
    with in_kyverno_policy():
        fails("hash.sha256(1)", match="no matching overload")
        fails("md5(object.spec)", {"object": {"spec": {"a": "b"}}})


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    """A probe or another engine's policy has no hash library: an error, never a value."""
    fails("hash.sha256('abc') != ''", match="Kyverno's library")
    fails("sha1('abc') != ''", match="Kyverno's library")


def test_each_call_is_charged_by_the_length_it_reads() -> None:
    """Hashing a 1 MB string over and over is refused by the cost bound, not run: each
    call is charged about 4,000 steps for its argument, so four of them pass 10,000."""
    expression = Expression("[1, 2, 3, 4].all(i, hash.sha256(object.data) != '')")
    data = {"object": {"data": "x" * 1_000_000}}
    with in_kyverno_policy():
        assert expression.evaluate(data, StepMeter(100_000)) is True
        with pytest.raises(CelError, match=r"too costly.*hash\.sha256\(\)"):
            expression.evaluate(data, StepMeter(10_000))
