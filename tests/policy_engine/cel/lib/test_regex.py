"""Kubernetes' regex library, against its documented behaviour (RE2 patterns)."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

TRUE = [
    "'abc 123'.find('[0-9]+') == '123' && 'abc 123'.find('xyz') == ''",
    # an empty match is a match: '[0-9]*' finds '' at the start of 'abc 123'
    "'abc 123'.find('[0-9]*') == ''",
    "'123 abc 456'.findAll('[0-9]+') == ['123', '456']",
    "'123 abc 456'.findAll('[0-9]+', 1) == ['123'] && '123 abc 456'.findAll('[0-9]+', 0) == []",
    "'123 abc 456'.findAll('[0-9]+', -1) == ['123', '456'] && '123 abc 456'.findAll('xyz') == []",
    "'1, 2, 3, 4'.findAll('[0-9]+').map(x, int(x)).sum() < 100",
]
ERRORS = [
    ("'a'.find('(')", "invalid regular expression"),
    ("'a'.findAll('a(?=b)')", "invalid regular expression"),  # lookahead is not RE2
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, match=reason)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # a pattern read from the object (Gatekeeper's allowedRegex): RE2, a partial match
        ("object.name.matches(object.pattern)", True),
        ("matches(object.name, object.pattern)", True),
        ("object.name.matches('^' + object.prefix)", True),
        ("object.name.matches(object.prefix + 'z')", False),
        ("object.names.all(n, n.matches(object.pattern))", False),
    ],
)
def test_matches_with_a_computed_pattern(expression: str, expected: bool) -> None:
    data = {"name": "web-12", "pattern": "[0-9]+$", "prefix": "web", "names": ["a1", "b"]}
    assert value(expression, {"object": data}) is expected


def test_a_computed_pattern_that_is_invalid_is_an_error() -> None:
    fails("object.name.matches(object.pattern)", {"object": {"name": "a", "pattern": "(("}},
          match="invalid regular expression")  # fmt: skip


def test_contains_is_linear_in_its_strings() -> None:
    """Red team: the runtime's ``contains`` searched naively (position by position), so a
    400 KB string of 'a's and a 200 KB needle of 'a's then 'b' took ~0.8 s per object
    (2 MB and 1 MB: 30 s) for one step. It is searched in linear time, and charged over its
    strings' lengths."""
    import time

    data = {"object": {"h": "a" * 400_000, "n": "a" * 200_000 + "b"}}
    started = time.perf_counter()
    for _ in range(5):
        assert value("object.h.contains(object.n)", data) is False
    assert time.perf_counter() - started < 0.5
    holds("'abc'.contains('b') && !'abc'.contains('d') && 'abc'.contains('')")
    holds("sets.contains([1, 2], [1]) && object.h.contains(object.h)", data)


def test_a_computed_pattern_is_charged_for_its_text_times_its_length() -> None:
    """Red team: a 27,000-character alternation from the object runs RE2's DFA out of
    memory, and each match over a 2,000-character name fell back to the NFA: ~0.6 s a
    call, charged ~8,000 steps (40 ms), so a probe run's steps allowed minutes. A computed
    pattern's call is charged its text's length times its pattern's."""
    from workers.policy_engine.cel.programs import BoolProgram, CelError

    pattern = "(" + "|".join(f"[a-z]{{{j % 50 + 1}}}x0y{j}" for j in range(1500)) + ")"
    objects = [{"n": "a" * 2000, "p": pattern} for _ in range(10)]
    program = BoolProgram("object.n.matches(object.p)", max_steps=300_000)
    with pytest.raises(CelError, match="too costly"):
        for item in objects:
            program({"object": item})


def test_capture_groups_of_a_computed_pattern_cost_no_more_than_its_length() -> None:
    """Red team 2: RE2 tracking 6,500 capture groups (``(a|b)`` repeated) over 8,000
    characters took 258 s for one call charged ~1,000,000 steps (under a probe run's
    bound): a pattern only tested needs no groups, and is compiled without them."""
    import time

    data = {"object": {"s": "a" * 8000, "p": "(a|b)" * 6500}}
    started = time.perf_counter()
    assert value("object.s.matches(object.p)", data) is True
    assert value("object.s.find(object.p).size() == 6500", data) is True
    assert time.perf_counter() - started < 5


def test_find_refuses_a_pattern_matches_refuses() -> None:
    """Red team 2: find() and findAll() compiled a computed pattern of any length (one of a
    megabyte: 0.3 s, the DFA run out of memory); they refuse what matches() refuses."""
    data = {"object": {"s": "x", "p": "(a|b)" * 7000}}
    for expression in ("object.s.find(object.p) == ''", "object.s.findAll(object.p) == []"):
        fails(expression, data, match="too costly")


def test_a_literal_pattern_is_charged_for_its_program_over_the_text() -> None:
    """Red team 2: a 14-character literal pattern with a counted repetition
    (``a[ab]{1000}c``: a program of 1,006 instructions) over a 100 KB string of the object
    runs RE2's DFA out of memory and searched for ~0.5 s, charged 5 steps as its length
    alone. Each call is charged its text times its compiled program."""
    from workers.policy_engine.cel.programs import BoolProgram, CelError

    text = ("ab" * 50_000)[:100_000]
    program = BoolProgram("object.s.matches('a[ab]{1000}c')", max_steps=100_000)
    with pytest.raises(CelError, match="too costly"):
        for _ in range(50):
            program({"object": {"s": text}})


def test_one_call_of_a_literal_pattern_costs_its_compiled_program_not_its_length() -> None:
    """``a[ab]{1000}c`` is 12 characters and a program of about 1,000 instructions. One call
    over 100,000 characters is charged text x program (~390,000 steps): a probe run allowed
    200,000 is refused at its first object. Charged by the pattern's length it would cost
    ~5,000 steps a call and pass 30 objects. A pattern of the same length without the
    repetition passes 30 objects within the same run's steps."""
    from workers.policy_engine.cel.programs import BoolProgram, CelError

    data = {"object": {"s": ("ab" * 50_000)[:100_000]}}
    repeated = BoolProgram("object.s.matches('a[ab]{1000}c')", max_steps=200_000)
    with pytest.raises(CelError, match="too costly"):
        repeated(data)
    assert repeated.steps > 300_000, "the first object's one call was charged text x program"
    plain = BoolProgram("object.s.matches('a[ab]cdefghi')", max_steps=200_000)
    for _ in range(30):
        assert plain(data) is False
    assert plain.steps < 200_000


def test_an_out_of_memory_dfa_is_not_logged_per_match(capfd: pytest.CaptureFixture[str]) -> None:
    """Red team 2: every search whose DFA ran out of memory wrote a line to the worker's
    stderr ("DFA out of memory: pattern length ..."): a listing of hostile objects flooded
    the logs. The search falls back to the NFA (charged for it) without a word."""
    pattern = "(" + "|".join(f"[a-z]{{{j % 50 + 1}}}x0y{j}" for j in range(1500)) + ")"
    value("object.n.matches(object.p)", {"object": {"n": "a" * 200, "p": pattern}})
    assert "DFA out of memory" not in capfd.readouterr().err
