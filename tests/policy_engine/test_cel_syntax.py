"""The syntax tree (workers/policy_engine/cel/syntax/): the runtime's own parse of what
the author wrote, written back as text that parses to the same tree, and read for what it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.testing.cel_expressions import read_expressions
from workers.policy_engine.cel.syntax.nodes import Call, Ident, Literal, Select, same, walk
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.cel.syntax.reads import (
    Reference,
    field_paths,
    functions,
    reads,
    references,
    variables_read,
)
from workers.policy_engine.cel.syntax.unparser import unparse

ROOT = Path(__file__).resolve().parents[2]


def _corpus() -> list[str]:
    return read_expressions(
        [ROOT / "tests" / "fixtures" / "cel_corpus", ROOT / "examples" / "policies"]
    )


# Forms the grammar allows that a lexer of one's own gets wrong, each parsed as the runtime does.
TRICKY = [
    "a // a comment naming variables.x\n  == 1",
    "'''it's a\nmulti-line string''' == a",
    '"""x""" == a && r"\\d+" == b && R\'\\w\' == c',
    "b'\\xff\\x00' == a && B'abc' == b && br'\\d' == c",
    "'\\u00e9\\U0001F600\\x41\\101\\a\\b\\f\\n\\r\\t\\v\\\\\\'\\\"\\`\\?' == a",
    "'é😀' + a.`b-c` + a.`in` + a.`b.c/d e` == x",
    "x in [1, 2] && 'k' in {'k': 1} && !(a in b)",
    "a.?b.?c.orValue(1) + a[?0].orValue(2) + {?'a': x}.size() + [?x, y].size()",
    "a.?b.optMap(x, x + 1).optFlatMap(y, optional.of(y)).orValue(0)",
    "xs.all(x, x > 1) && xs.exists(x, x) && xs.exists_one(x, x) && xs.map(x, x > 0, x) == []",
    "m.all(k, v, v > k) && m.transformList(i, v, v > 0, v) == [] && m.transformMap(k, v, v) == {}",
    "cond ? a : b ? c : d",
    "(cond ? a : b) ? c : d",
    "x ? (y ? 1 : 2) : 3",
    "1 - (2 - 3) == (1 - 2) - 3 && -(1) == -1 && -(-1) == 1 && - -1 == 1",
    "(-1).f() + -a.b + !(!a) + -(1.5)",
    "0x1F == 31 && 0x1Fu == 31u && 1e3 == 1000.0 && .5 == 0.5 && 1e-3 == 0.001",
    "-9223372036854775808 < 9223372036854775807 && 18446744073709551615u > 0u",
    "1.7976931348623157e309 > 1.0 && -0.0 == 0.0 && 1e-320 > 0.0",
    "null == null && true != false",
    "(a + b).size() + (a ? b : c).d + [1, 2][0] + {'a': 1}['a']",
    "Foo{a: 1, ?b: 2}",
    "(a || b) && c || !a && !b",
    "a < b == (c < d)",
    "f() + a.f() + size(-1) + a[-1] + a[1 + 2]",
    "\t a\r\n\t==\t1 // trailing",
]


@pytest.mark.parametrize("text", _corpus() + TRICKY)
def test_a_tree_written_back_parses_to_the_same_tree(text: str) -> None:
    tree = parse(text)
    again = parse(unparse(tree.root))
    assert same(tree.root, again.root), unparse(tree.root)


def test_the_corpus_is_read() -> None:
    assert len(_corpus()) >= 100


@pytest.mark.parametrize(
    "text",
    ["a == ", "'unterminated == a", "a.0", "a === 1", "a ++ 1", "", "// only a comment",
     "'\\z' == a", "if == 1", "a = 1", "(" * 40 + "1" + ")" * 40],
)  # fmt: skip
def test_what_the_runtime_does_not_parse_is_refused_with_its_place(text: str) -> None:
    with pytest.raises(CelSyntaxError) as caught:
        parse(text)
    assert "<input>" not in str(caught.value)


def test_positions_are_code_points_of_the_authors_text() -> None:
    tree = parse("'é😀' == x.y")
    select = next(n for n in walk(tree.root) if isinstance(n, Select))
    assert select.at == 9 and tree.line_column(select.at) == (1, 10)
    literal = next(n for n in walk(tree.root) if isinstance(n, Literal))
    assert literal.value == "é😀" and literal.at == 0


def test_macros_are_kept_as_written() -> None:
    root = parse("xs.all(x, x.a) && has(o.b) && v.?w.optMap(y, y)").root
    calls = {n.function: n for n in walk(root) if isinstance(n, Call)}
    assert {"all", "has", "optMap"} <= set(calls)
    assert calls["all"].args[0] == Ident("x", at=7)
    assert isinstance(calls["optMap"].target, Select) and calls["optMap"].target.optional


def test_reads_are_scoped_to_the_macros_that_bind_names() -> None:
    root = parse(
        "object.spec.containers.all(object, object.image != '') && has(object.metadata)"
        " && [1].exists(results, results == 1) && variables.a + variables.b == variables.a"
        " && cel.bind(params, 1, params + 1) == params.x"
    ).root
    assert reads(root, "object") and not reads(root, "results") and reads(root, "params")
    assert variables_read(root) == ["a", "b", "a"]
    assert Reference("object", ("spec", "containers", "all"), called=True) in references(root)
    assert Reference("object", ("image",)) not in references(root)  # the macro's variable
    assert Reference("params", ("x",)) in references(root)
    assert {"all", "exists", "has", "bind", "cel.bind"} <= functions(root)


def test_field_paths_are_read_from_any_chain() -> None:
    root = parse("object.spec.containers.all(c, c.securityContext.runAsNonRoot == true)").root
    assert field_paths(root) == ["spec.containers", "securityContext.runAsNonRoot"]
