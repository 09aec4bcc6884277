"""What CEL calls over large input cost, against the steps they are charged. Prints figures;
asserts nothing.

    .venv/bin/python bench/bench_cel_calls.py [--size 1000000] [--repeat 3]

The probe cost bound (workers/policy_engine/probes/cost.py, cel/lib/base.py) counts in steps of
about 5 us. Each case here is one expression over input sized to the hostile end (a string of
--size characters, lists of --size/50 elements); it is evaluated with no step limit, and the
table shows the best wall time of --repeat runs, the steps it was charged (the estimate before
evaluation plus the library calls' own charges) and the ratio of the time to the time its steps
stand for (``steps x 5 us``): a ratio above 1 means the bound lets that call run longer than it
counts. Cases: the Kubernetes libraries written in Python (charged as they run) and the
runtime's own functions (costed before evaluation only: sets, and whole strings read in a
comprehension body).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workers.policy_engine.cel.programs import BoolProgram, CelError  # noqa: E402

STEP_US = 5.0


def cases(size: int) -> list[tuple[str, str, dict[str, Any]]]:
    text = "aB," * (size // 3)
    items = size // 50
    words = [f"w{i}" for i in range(items)]
    others = [f"x{i}" for i in range(items)]
    loop = list(range(1000))
    big = text[: size // 10]  # read 1,000 times in a comprehension
    url_text = "https://example.com/" + "a" * size + "?q=" + "b&c=" * (size // 10)
    return [
        # Python libraries, charged per call over their actual arguments
        ("charAt (converting the string)", "object.s.charAt(0) != ''", {"s": text}),
        ("indexOf", "object.s.indexOf('zz') == -1", {"s": text}),
        ("lowerAscii", "object.s.lowerAscii() != ''", {"s": text}),
        ("upperAscii", "object.s.upperAscii() != ''", {"s": text}),
        ("split(',')", "size(object.s.split(',')) > 0", {"s": text}),
        ("split('')", "size(object.s.split('')) > 0", {"s": text}),
        ("replace", "object.s.replace('a', 'bb') != ''", {"s": text}),
        ("trim", "object.s.trim() != ''", {"s": text}),
        ("strings.quote", "strings.quote(object.s) != ''", {"s": text}),
        ("join", "object.l.join(',') != ''", {"l": words}),
        ("format %s", "'%s'.format([object.s]) != ''", {"s": text}),
        ("format template", "object.s.format([]) != ''", {"s": "ab" * (size // 2)}),
        ("find", "object.s.find('[0-9]+') == ''", {"s": text}),
        ("findAll (every match)", "size(object.s.findAll('a')) > 0", {"s": text[: size // 10]}),
        # a pattern from the input, per element (compiled once, charged its length per call)
        (
            "matches (computed pattern)",
            "object.l.all(w, !w.matches(object.p))",
            {"l": words[:5_000], "p": "q" * 30_000},
        ),
        ("lists indexOf", "object.l.indexOf('zz') == -1", {"l": words}),
        ("lists isSorted", "object.l.isSorted() || true", {"l": words}),
        ("lists max", "object.l.max() != ''", {"l": words}),
        ("url getQuery", "size(url(object.u).getQuery()) > 0", {"u": url_text}),
        ("url getEscapedPath", "url(object.u).getEscapedPath() != ''", {"u": url_text}),
        ("isURL", "isURL(object.u)", {"u": url_text}),
        ("quantity", "isQuantity(object.s) || true", {"s": "1" * 900 + "." + "0" * size}),
        (
            "format.dns1123Subdomain",
            "format.dns1123Subdomain().validate(object.s).hasValue()",
            {"s": "a." * (size // 2)},
        ),
        ("isCIDR", "isCIDR(object.s) || true", {"s": "1" * size}),
        ("semver", "isSemver(object.s) || true", {"s": "1.2.3-" + "a" * size}),
        # the runtime's own, costed before evaluation
        (
            "sets.intersects (disjoint)",
            "sets.intersects(object.a, object.b) || true",
            {"a": words, "b": others},
        ),
        (
            "sets.contains (all found)",
            "sets.contains(object.a, object.b)",
            {"a": words, "b": list(reversed(words))},
        ),
        (
            "sets.equivalent",
            "sets.equivalent(object.a, object.b)",
            {"a": words, "b": list(reversed(words))},
        ),
        ("size(s) x 1000", "object.i.all(i, size(object.s) > 0)", {"s": big, "i": loop}),
        ("s.contains x 1000", "object.i.all(i, !object.s.contains('zz'))", {"s": big, "i": loop}),
        ("s + 'a' x 1000", "object.i.all(i, object.s + 'a' != '')", {"s": big, "i": loop}),
        ("s.charAt x 1000", "object.i.all(i, object.s.charAt(0) != '')", {"s": big, "i": loop}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'case':34} {'ms':>9} {'steps':>10} {'ratio':>6}")
    for name, expression, data in cases(args.size):
        best, steps, note = float("inf"), 0, ""
        for _ in range(args.repeat):
            program = BoolProgram(expression, max_steps=10**12)
            started = time.perf_counter()
            try:
                program({"object": data})
            except CelError as exc:
                note = f"  ({str(exc)[:60]})"
            best = min(best, time.perf_counter() - started)
            steps = program.steps
        ratio = best * 1e6 / (steps * STEP_US) if steps else float("inf")
        print(f"{name:34} {best * 1000:9.1f} {steps:10,} {ratio:6.2f}{note}")


if __name__ == "__main__":
    main()
