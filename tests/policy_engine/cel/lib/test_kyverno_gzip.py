"""Kyverno's gzip library, ``gzip.decompress(bytes)``: the text of gzip data, as Go's reader
gives it (every member, checksums checked), errors for what is not gzip, bounded as it
inflates; only inside a Kyverno ValidatingPolicy."""

from __future__ import annotations

import gzip

import pytest

from tests.policy_engine.cel.lib.kyverno_support import in_kyverno_policy
from tests.policy_engine.cel.lib.support import fails, value
from workers.policy_engine.cel.lib.base import TooCostly
from workers.policy_engine.cel.lib.kyverno_gzip import decompress
from workers.policy_engine.cel.programs import CelError, Expression, StepMeter


def literal(data: bytes) -> str:
    """A CEL bytes literal of ``data``."""
    return 'b"' + "".join(f"\\x{byte:02x}" for byte in data) + '"'


def packed(text: str) -> bytes:
    return gzip.compress(text.encode(), mtime=0)


def test_decompress_gives_the_text() -> None:
    with in_kyverno_policy():
        assert value(f"gzip.decompress({literal(packed('assay'))})") == "assay"
        assert value(f"gzip.decompress({literal(packed(''))})") == ""
        assert value(f"gzip.decompress({literal(packed('héllo'))})") == "héllo"


def test_concatenated_members_are_one_text() -> None:
    """Go's reader reads a multi-member stream through (gzip -c a b > ab)."""
    with in_kyverno_policy():
        assert value(f"gzip.decompress({literal(packed('ab') + packed('cd'))})") == "abcd"


ERRORS = [
    (b"", "empty"),
    (b"plain text", "not gzip"),
    (packed("assay")[:-6], "ends early|not gzip"),  # truncated in its trailer
    (packed("assay")[:-8] + b"\x00\x00\x00\x00" + packed("assay")[-4:], "not gzip"),  # CRC
    (packed("assay") + b"\x00\x00", "not gzip"),  # bytes after the last member
    (gzip.compress(b"\xff\xfe", mtime=0), "not UTF-8"),
    (gzip.compress(b"a\x00b", mtime=0), "NUL"),  # the runtime's strings would end there
]


@pytest.mark.parametrize(("data", "reason"), ERRORS)
def test_what_is_not_gzip_text_gives_no_value(data: bytes, reason: str) -> None:
    with in_kyverno_policy():
        fails(f"gzip.decompress({literal(data)}) != ''", match=reason)


def test_only_bytes_are_taken_and_compress_is_not_served() -> None:
    with in_kyverno_policy():
        fails("gzip.decompress('text') == ''", match="no matching overload")
        fails("gzip.compress('text') == b''", match="undeclared|no matching")


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails(f"gzip.decompress({literal(packed('a'))}) == 'a'", match="Kyverno's library")


def test_a_gzip_bomb_is_charged_as_it_inflates() -> None:
    """Under 1 KB of gzip that inflates to 900 KB, four times: refused by the cost bound
    (the output charged as it is made, about 3,500 steps a call), not by its input's size."""
    bomb = literal(gzip.compress(b"a" * 900_000, mtime=0))
    expression = Expression(f"[1, 2, 3, 4].all(i, size(gzip.decompress({bomb})) > 0)")
    with in_kyverno_policy():
        assert expression.evaluate({}, StepMeter(100_000)) is True
        with pytest.raises(CelError, match=r"too costly.*gzip\.decompress"):
            expression.evaluate({}, StepMeter(10_000))


def test_an_output_past_the_limit_is_refused_whatever_the_budget() -> None:
    """20 MB of output (from 20 KB): refused once it passes MAX_RESULT_CHARS."""
    bomb = gzip.compress(b"a" * 20_000_000, mtime=0)
    with in_kyverno_policy(), pytest.raises(TooCostly, match="characters"):
        decompress(bomb)
