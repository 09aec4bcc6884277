"""How much real-world admission CEL assay runs, and rightly. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_cel.py                       # assay's corpus
    .venv/bin/python bench/bench_cel.py --library DIR [...]   # a policy library's own tests
    .venv/bin/python bench/bench_cel.py --library GIT_DIR:SUBFOLDER   # a fetched mirror

A library is any folder of Kyverno CLI tests (``kind: Test``, e.g. a checkout of
kyverno/policies), Kyverno's chainsaw conformance tests (kyverno/kyverno's
``test/conformance/chainsaw``), Gatekeeper suites (``kind: Suite``, e.g.
gatekeeper-library) or a ValidatingAdmissionPolicy library with ``controls/*/tests.json``
(kubescape's cel-admission-library). A bare git directory (a mirror without a work tree) is
read at its HEAD, the folder after ``:`` only. Each labelled fixture (one object; allowed or
disallowed) is judged by importing its policy as ``assay probe import`` does and running it
over a snapshot of that object (assay/testing/policy_corpus.py). Printed, per library:

* labelled pairs, how many agree and disagree with their label, how many are refused, each
  refusal in assay's words with its count, and whether the data it names is one a stored
  cluster holds (a gap another change serves) or truly lives in an admission request;
* fixtures that get a probe value (the rest: their policy is refused at import, with the
  reason, or a probe could not run);
* of those, how many agree with their label (every disagreement is listed);
* every policy that gave a value, exported as a ValidatingAdmissionPolicy and as a Kyverno
  ValidatingPolicy (one with params: as a VAP only): how many pass the export's checks;
* the median time of one policy run over its one-object snapshot;
* with ``--reasons``, the fixtures left out (not labelled for a stored object, or of a
  policy that does not validate with CEL) and the export problems, most common first.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.testing.given_folder import folder_spec, given_folder  # noqa: E402
from assay.testing.kyverno_configuration import CONFIGURATION_PATHS  # noqa: E402
from assay.testing.policy_corpus import (  # noqa: E402
    disagreement_class,
    evaluate,
    read_library,
    refusal_class,
)

CORPUS = ROOT / "tests" / "fixtures" / "cel_corpus"


def report(name: str, folder: Path, reasons: bool) -> None:
    reading = read_library(folder)
    figures = evaluate(reading.fixtures, reading.skipped)
    print(f"== {name} ({folder})")
    for line in figures.lines():
        print(f"  {line}")
    valued = len(figures.valued)
    disagree = len(figures.disagreements)
    print(
        f"  labelled pairs: {len(figures.judgements)}, agree: {valued - disagree}, "
        f"disagree: {disagree}, refused: {len(figures.judgements) - valued}"
    )
    for j in figures.disagreements:
        label = "allowed" if j.fixture.allowed else "disallowed"
        owner = disagreement_class(j) or "not explained: a fidelity bug"
        print(
            f"  DISAGREES [{owner}] {j.fixture.source}: {j.fixture.policy} {j.fixture.name}: "
            f"{label}, assay said {j.value}"
        )
    classes: Counter[str] = Counter()
    for reason, count in figures.refused.items():
        classes[refusal_class(reason)] += count
    for what, count in classes.most_common():
        print(f"  refused x{count}: {what}")
    for reason, count in figures.refused.most_common():
        print(f"    x{count} [{refusal_class(reason)}] {reason[:200]}")
    if reasons:
        for reason, count in reading.skipped.most_common():
            print(f"  left out x{count}: {reason}")
        for problem, count in figures.export_problems.most_common(15):
            print(f"  export refused x{count}: {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--library",
        action="append",
        default=[],
        type=folder_spec,
        help="a folder of a library's tests, or GIT_DIR:SUBFOLDER of a mirror (repeatable)",
    )
    parser.add_argument("--reasons", action="store_true", help="why fixtures got no value")
    args = parser.parse_args(argv)
    for spec in args.library or [str(CORPUS)]:
        # a mirror's tests go with the engine configuration they ran under, where it holds one
        with given_folder(spec, beside=CONFIGURATION_PATHS) as folder:
            report(spec, folder, args.reasons)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
