"""How much real-world admission CEL assay runs, and rightly. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_cel.py                       # assay's corpus
    .venv/bin/python bench/bench_cel.py --library DIR [...]   # a policy library's own tests

A library is any folder of Kyverno CLI tests (``kind: Test``, e.g. a checkout of
kyverno/policies) or Gatekeeper suites (``kind: Suite``, e.g. gatekeeper-library): each
labelled fixture (one object; allowed or disallowed) is judged by importing its policy as
``assay probe import`` does and running it over a snapshot of that object
(assay/testing/policy_corpus.py). Printed, per library:

* fixtures that get a probe value (the rest: their policy is refused at import, with the
  reason, or a probe could not run);
* of those, how many agree with their label (every disagreement is listed);
* every policy that gave a value, exported as a ValidatingAdmissionPolicy and as a Kyverno
  ValidatingPolicy (one with params: as a VAP only): how many pass the export's checks;
* the median time of one policy run over its one-object snapshot;
* with ``--reasons``, why fixtures got no value, most common first.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.testing.policy_corpus import evaluate, iter_disagreements, read_library  # noqa: E402

CORPUS = ROOT / "tests" / "fixtures" / "cel_corpus"


def report(name: str, folder: Path, reasons: bool) -> None:
    reading = read_library(folder)
    figures = evaluate(reading.fixtures, reading.skipped)
    print(f"== {name} ({folder})")
    for line in figures.lines():
        print(f"  {line}")
    for line in iter_disagreements(figures):
        print(f"  DISAGREES {line}")
    if reasons:
        why: Counter[str] = Counter(r[:140] for r in figures.refused.elements())
        for reason, count in why.most_common(25):
            print(f"  no value x{count}: {reason}")
        for reason, count in reading.skipped.most_common():
            print(f"  left out x{count}: {reason}")
        for problem, count in figures.export_problems.most_common(15):
            print(f"  export refused x{count}: {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--library",
        action="append",
        type=Path,
        default=[],
        help="a folder of Kyverno tests or Gatekeeper suites (repeatable)",
    )
    parser.add_argument("--reasons", action="store_true", help="why fixtures got no value")
    args = parser.parse_args(argv)
    folders = args.library or [CORPUS]
    for folder in folders:
        report(folder.name, folder, args.reasons)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
