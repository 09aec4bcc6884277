"""The CEL front end (workers/policy_engine/cel/syntax/): how faithfully and how fast it parses.
Prints figures; asserts nothing.

    .venv/bin/python bench/bench_cel_front_end.py [--library DIR ...]

Expressions are every ``expression`` and ``messageExpression`` in assay's corpus
(tests/fixtures/cel_corpus/, examples/policies/) and in each ``--library`` folder (a
checkout of a policy library: kyverno/policies, gatekeeper-library), plus inputs chosen to
be hard for a parser (comments, every string and bytes form, escapes, reserved words,
optional syntax, macros, numbers at their limits, deep nesting). Printed:

* fidelity: for how many the front end (the runtime's parser with its macros off, then the
  whole compile of what it writes back) accepts exactly what the runtime itself accepts
  (its own parse, macros on), and how many trees written back parse to the same tree;
* the same agreement for other Python CEL parsers when they are installed (cel-python,
  celparser): none is a dependency; install one into the venv to compare;
* speed: one parse (the runtime's parse, decoding its ParsedExpr, building the tree), one
  unparse, and building an expression the first time (parse, rewrites, compile) and again
  (cached), median microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.testing.cel_expressions import read_expressions  # noqa: E402
from workers.policy_engine.cel import programs as cel  # noqa: E402
from workers.policy_engine.cel.syntax import parser  # noqa: E402
from workers.policy_engine.cel.syntax.nodes import same  # noqa: E402
from workers.policy_engine.cel.syntax.unparser import unparse  # noqa: E402

CORPORA = (ROOT / "tests" / "fixtures" / "cel_corpus", ROOT / "examples" / "policies")
HARD = [
    "a // a comment naming variables.x\n  == 1",
    "'''it's a\nmulti-line string''' == a",
    '"""x""" == a && r"\\d+" == b && R\'\\w\' == c',
    "b'\\xff\\x00' == a && B'abc' == b && br'\\d' == c",
    "rb'\\d' == a",
    "'\\u00e9\\U0001F600\\x41\\101\\a\\b\\f\\n\\r\\t\\v\\\\\\'\\\"\\`\\?' == a",
    "'\\z' == a",
    "'\\u12' == a",
    "'unterminated == a",
    "'é😀' + a.`b-c` + a.`in` == x",
    "a.in == 1",
    "a.namespace == 1",
    "namespace == 1",
    "if == 1",
    "x in [1, 2] && 'k' in {'k': 1}",
    "a.?b.?c.orValue(1) + a[?0].orValue(2) + {?'a': x}.size() + [?x, y].size()",
    "a.?b.optMap(x, x + 1).optFlatMap(y, optional.of(y)).orValue(0)",
    "xs.all(x, x > 1) && xs.exists_one(x, x) && xs.map(x, x > 0, x) == []",
    "m.all(k, v, v > k) && m.transformList(i, v, v > 0, v) == []",
    "xs.all(1, true)",
    "has(a)",
    "has(a[0])",
    "has(a.?b)",
    "cel.bind(x, 1, x)",
    "cond ? a : b ? c : d",
    "1 - (2 - 3) == (1 - 2) - 3 && -(1) == -1 && - -1 == 1",
    "0x1F == 31 && 0x1Fu == 31u && 1e3 == 1000.0 && .5 == 0.5",
    "1. == 1.0",
    "9223372036854775808",
    "-9223372036854775808 < 9223372036854775807 && 18446744073709551615u > 0u",
    "18446744073709551616u",
    "1.7976931348623157e309 > 1.0",
    "a.b(1,)",
    "[1, 2,] == {'a': 1,}.values()",
    "Foo{a: 1, ?b: 2}",
    "a = 1",
    "a === 1",
    "a.0",
    "",
    "// only a comment",
    "(" * 31 + "1" + ")" * 31,
    "(" * 33 + "1" + ")" * 33,
    " + ".join(["1"] * 40),
    " && ".join(["a"] * 500),
    "a" + ".b" * 40,
]


def _accepts(parse: Callable[[str], Any], text: str) -> bool:
    try:
        parse(text)
    except Exception:
        return False
    return True


def _runtime(text: str) -> None:
    cel._environment(cel.PROBE_VERSION).compile(text, disable_check=True)


def _front_end(text: str) -> None:
    """What assay's front end accepts: its parse, and the runtime's parse (macros on) of
    what it writes back."""
    _runtime(unparse(parser.parse(text).root))


def _candidates() -> dict[str, Callable[[str], Any]]:
    out: dict[str, Callable[[str], Any]] = {"assay front end": _front_end}
    try:
        import celpy  # type: ignore[import-not-found,unused-ignore]

        environment = celpy.Environment()
        out["cel-python (celpy)"] = environment.compile
    except ImportError:
        pass
    try:
        import celparser  # type: ignore[import-not-found,unused-ignore]

        out["celparser"] = celparser.parse
    except ImportError:
        pass
    return out


def fidelity(name: str, texts: list[str]) -> None:
    expected = {text: _accepts(_runtime, text) for text in texts}
    for label, parse in _candidates().items():
        agree = sum(_accepts(parse, text) == expected[text] for text in texts)
        print(f"  {name}: {label} accepts as the runtime does for {agree} of {len(texts)}")
    trees = [parser.parse(t).root for t in texts if _accepts(parser.parse, t)]
    again = sum(same(tree, parser.parse(unparse(tree)).root) for tree in trees)
    print(f"  {name}: written back, {again} of {len(trees)} parse to the same tree")


def _median_us(run: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def speed(texts: list[str]) -> None:
    good = [t for t in texts if _accepts(parser.parse, t)]
    chars = statistics.mean(len(t) for t in good)
    parse_us = _median_us(lambda: [parser.parse.__wrapped__(t) for t in good], 5) / len(good)
    trees = [parser.parse(t).root for t in good]
    unparse_us = _median_us(lambda: [unparse(tree) for tree in trees], 5) / len(trees)
    compiled = [t for t in good if _accepts(cel.Expression, t)]

    def build() -> None:
        cel._build.cache_clear()
        cel._compiled.cache_clear()
        parser.parse.cache_clear()
        for text in compiled:
            cel.Expression(text)

    first_us = _median_us(build, 3) / len(compiled)
    again_us = _median_us(lambda: [cel.Expression(t) for t in compiled], 5) / len(compiled)
    print(f"  {len(good)} expressions, {chars:.0f} characters on average")
    print(f"  one parse (runtime parse + ParsedExpr decode + tree): {parse_us:.0f} us")
    for label, other in _candidates().items():
        if label != "assay front end":
            theirs = [t for t in good if _accepts(other, t)]

            def run(parse: Callable[[str], Any] = other, texts: list[str] = theirs) -> None:
                for text in texts:
                    parse(text)

            other_us = _median_us(run, 3) / len(theirs)
            print(f"  one parse by {label}: {other_us:.0f} us ({len(theirs)} it accepts)")
    print(f"  one unparse: {unparse_us:.0f} us")
    print(f"  an expression built the first time (parse, rewrites, compile): {first_us:.0f} us;"
          f" again (cached): {again_us:.0f} us")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    arguments.add_argument("--library", action="append", type=Path, default=[])
    args = arguments.parse_args(argv)
    corpus = read_expressions(list(CORPORA))
    print("== fidelity")
    fidelity("assay's corpus", corpus)
    for folder in args.library:
        fidelity(folder.name, read_expressions([folder]))
    fidelity("hard inputs", HARD)
    print("== speed (assay's corpus and libraries)")
    speed(corpus + [t for folder in args.library for t in read_expressions([folder])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
