"""Snapshot YAML loads exactly as PyYAML's safe loader loads it, only faster.

A snapshot is the cluster's word: a value read as another type (``"yes"`` as a bool,
``"0x1F"`` as a string) would change what a predicate sees. Every document here is
loaded both ways and compared value by value with its type, errors included. One
difference from PyYAML is on purpose, on both ways alike: an unquoted timestamp is the
API server's text (``2023-06-26T15:04:05Z``), not a datetime.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.engine.toolsets import yaml_documents
from workers.engine.toolsets.yaml_documents import load_documents, may_alias

ROOT = Path(__file__).resolve().parents[2]


def _typed(value: Any) -> Any:
    """``value`` with every type spelled out: ``1``, ``1.0`` and ``True`` compare equal."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(item) for item in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    if isinstance(value, datetime):
        return ("datetime", value.isoformat(), str(value.tzinfo))
    if isinstance(value, date | bytes | set):
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


def _outcome(documents: Iterator[Any]) -> list[Any]:
    """Every document in order, then the error that ended the stream (type and text), if any."""
    seen: list[Any] = []
    try:
        for document in documents:
            seen.append(_typed(document))
    except Exception as exc:  # compared, not swallowed: both loaders must fail alike
        seen.append(("error", type(exc).__name__, str(exc)))
    return seen


def _reference(text: str) -> list[Any]:
    return _outcome(yaml.load_all(text, Loader=yaml_documents.ApiSafeLoader))


def _same_as_pyyaml(text: str) -> None:
    assert _outcome(load_documents(text)) == _reference(text), text


TRICKY_SCALARS = [
    "yes", "No", "on", "OFF", "y", "n", "true", "False", "~", "null", "Null", "",
    "0x1F", "0o17", "017", "0b101", "1_000", "-0", "+12", "190:20:30", "1e3", "1.5e-3",
    "6.8523015e+5", ".inf", "-.Inf", ".NaN", "3.", ".5", "2001-12-14", "2002-12-14 21:59:43.10 -5",
    "2001-12-14t21:59:43.10-05:00", "2001-12-15T02:59:43.1Z", "12:30", "=", "<<", "v1",
    "apps/v1", "'quoted'", '"0x1F"', "!!str 123", "!!int '7'", "!!float 1", "!!bool yes",
    "!!null ''", "!!binary R0lGODlhDAAMAIQAAP", "!!timestamp 2001-12-14", "!custom x",
    "!!set {a, b}", "!!omap [a: 1, b: 2]", "!!pairs [a: 1, a: 2]", "{a: 1, a: 2}",
    "[1, [2, [3]]]", "&anchor value", "|\n    block\n    text", ">-\n    folded\n    text",
]  # fmt: skip


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("2023-06-26T15:04:05Z", "2023-06-26T15:04:05Z"),
        ("2023-06-26 15:04:05", "2023-06-26T15:04:05Z"),  # no offset: UTC, as YAML says
        ("2023-06-26T17:04:05+02:00", "2023-06-26T15:04:05Z"),  # as the API prints it: UTC
        ("2023-06-26T15:04:05.5Z", "2023-06-26T15:04:05.5Z"),  # the digits written
        ("2023-06-26T15:04:05.123456Z", "2023-06-26T15:04:05.123456Z"),
        ("2002-12-14 21:59:43.10 -5", "2002-12-15T02:59:43.10Z"),
        ("2023-06-26", "2023-06-26"),  # a date alone stays as written
        ('"2023-06-26 15:04:05"', "2023-06-26 15:04:05"),  # a quoted string is a string
    ],
)
def test_an_unquoted_timestamp_reads_as_the_api_server_s_text(written: str, read: str) -> None:
    for text in (f"t: {written}\n", f"t: {written}\na: &x 1\nb: *x\n"):  # both ways
        assert next(load_documents(text))["t"] == read


@pytest.mark.parametrize("scalar", TRICKY_SCALARS)
def test_every_kind_of_scalar_is_read_as_pyyaml_reads_it(scalar: str) -> None:
    _same_as_pyyaml(f"value: {scalar}\nlist:\n- {scalar}\n")


@pytest.mark.parametrize(
    "text",
    [
        "base: &b {x: 1}\nchild:\n  <<: *b\n  y: 2\n",  # merge key through an alias
        "a: 1\n<<: {b: 2}\n",  # merge key without an alias
        "a: 1\n<<: [{b: 2}, {c: 3}]\n",
        "=: value\n",
        "? [a, b]\n: complex key\n",  # PyYAML refuses it: the same error, not a dict
        "? {a: 1}\n: complex key\n",
        "1: int key\n2.5: float key\ntrue: bool key\n~: null key\n2001-12-14: date key\n",
        "!!str 1: tagged key\n",
        "--- a\n--- [1, 2]\n--- {k: v}\n---\n...\n",
        "a: [1, 2\n",  # not YAML: the error PyYAML gives, after nothing
        "--- ok\n--- {bad\n",  # the first document, then the error
        "key: value\nkey: again\n",  # a duplicate key: the last one wins, as in PyYAML
        "!!map {a: 1}\n",
        "!!seq [1]\n",
        "x: !!python/object:os.system 'echo'\n",  # no code: refused as PyYAML's safe loader does
        "&a [1, 2]\n",  # an anchor without an alias
        "a: &x 1\nb: *x\n",
    ],
)
def test_documents_beyond_plain_data_are_built_by_pyyaml(text: str) -> None:
    _same_as_pyyaml(text)


def test_nesting_past_pythons_stack_is_handed_to_pyyaml() -> None:
    deep = "[" * 3000 + "]" * 3000
    _same_as_pyyaml(deep)
    _same_as_pyyaml("a:\n" + "".join("  " * depth + f"k{depth}:\n" for depth in range(1, 1200)))


def test_the_example_snapshots_load_exactly_as_before() -> None:
    files = sorted((ROOT / "examples" / "snapshots").rglob("*.y*ml"))
    assert files
    for file in files:
        _same_as_pyyaml(file.read_text(encoding="utf-8"))


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(TRICKY_SCALARS[:40]),
    st.dates(),
)
data = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.integers(), st.booleans()), inner, max_size=4
        ),
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(data, st.sampled_from([None, True, False]), st.integers(min_value=2, max_value=6))
def test_dumped_data_loads_as_pyyaml_loads_it(value: Any, flow: bool | None, indent: int) -> None:
    _same_as_pyyaml(yaml.safe_dump(value, default_flow_style=flow, indent=indent))
    _same_as_pyyaml(yaml.safe_dump_all([value, {"kind": "Pod"}, value]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TRICKY_SCALARS), min_size=1, max_size=6))
def test_hand_written_plain_scalars_load_as_pyyaml_loads_them(tokens: list[str]) -> None:
    flat = [token for token in tokens if "\n" not in token]
    _same_as_pyyaml("".join(f"k{i}: {token}\n" for i, token in enumerate(flat)) or "{}")
    _same_as_pyyaml("[" + ", ".join(flat) + "]")


def test_text_that_may_alias_is_left_to_pyyaml_whose_sharing_the_backend_bounds() -> None:
    """An alias met again would be copied each time here ("billion laughs" expanded)."""
    assert may_alias("a: &x [1]\nb: *x\n")
    assert not may_alias("a: &x [1]\n")  # an anchor, but nothing refers to it
    assert not may_alias("a: 2 * 3\n")
    bomb = "a: &a [x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(20)
    )
    (document,) = load_documents(bomb)  # 2^21 leaves if expanded; shared, it is instant
    assert document["u"][0] is document["u"][1]
