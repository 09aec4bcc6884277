"""Hold assay's admission-document model against Kyverno's and Gatekeeper's own CRD schemas.
Prints figures; exits 1 when the model accepts a field the CRD lacks or types differently.

    .venv/bin/python bench/check_admission_model.py --crds DIR_OR_GIT_DIR[:SUBFOLDER] [...]
        [--documents DIR_OR_GIT_DIR[:SUBFOLDER] ...]

``--crds`` (repeatable) is any folder holding CRD YAML files (``kind:
CustomResourceDefinition``), e.g. a checkout of kyverno/kyverno (``config/crds``) or of
open-policy-agent/gatekeeper; a bare git directory is read at its HEAD. Per served version
of the CRDs the model covers (assay/testing/crd_conformance.py's COVERAGE), it prints the
fields compared, the fields the model accepts that the CRD lacks or types differently (must
be none), the CRD fields the model does not know (a document using one is refused at
import: fail-safe), and what the CRD does not describe (nothing is compared there).

``--documents`` (repeatable) judges every ValidatingPolicy / NamespacedValidatingPolicy
document under the folder by its CRD version's schema and by the model as the importer
reads it, and prints how many both accept, only the CRD accepts, only the model accepts,
neither accepts, with each disagreement (file and first problem).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.testing.crd_conformance import (  # noqa: E402
    COVERAGE,
    CrdVersion,
    Held,
    Judgement,
    crd_versions,
    hold,
    judge_documents,
)
from assay.testing.given_folder import folder_spec, given_folder  # noqa: E402

_LISTED = 40  # entries shown per informational list


def _print_list(title: str, entries: list[str], limit: int | None = _LISTED) -> None:
    print(f"    {title}: {len(entries)}")
    for entry in entries[:limit]:
        print(f"      {entry}")
    if limit is not None and len(entries) > limit:
        print(f"      ... and {len(entries) - limit} more")


def report_held(held: list[Held], crds: list[CrdVersion]) -> int:
    """Print each comparison; the number of drifting fields."""
    drift = 0
    print(f"CRD versions read: {len(crds)} ({len({(c.group, c.kind) for c in crds})} kinds)")
    for h in held:
        crd = h.crd
        role = "storage" if crd.storage else "served"
        print(f"== {crd.kind} {crd.api_version} ({role}; {crd.file})")
        print(f"  model: {h.coverage.name} at {h.coverage.path or 'the document root'}")
        if crd.rules:
            print(f"  x-kubernetes-validations rules in the CRD (not compared): {crd.rules}")
        if h.comparison is None:
            print(f"  the CRD does not describe the way there (stops at {h.stops_at}): "
                  "nothing compared")  # fmt: skip
            continue
        c = h.comparison
        print(f"    fields compared: {len(c.compared)}")
        _print_list("accepted by the model, lacking or typed differently in the CRD", c.drift, None)
        _print_list("CRD fields the model does not know (refused at import)", c.unknown_to_model)
        _print_list("not described by the CRD (not compared)", c.undescribed)
        _print_list("passed through by the model unread", c.passed_through, 0)
        drift += len(c.drift)
    for coverage in COVERAGE:
        if not any(h.coverage is coverage for h in held):
            print(f"== {coverage.kind} ({coverage.group}): no served version among the CRDs given")
    return drift


def report_documents(name: str, judgement: Judgement) -> None:
    print(f"== documents in {name}")
    print(
        f"  judged: {len(judgement.judged)}, partial (chainsaw asserts, left out): "
        f"{judgement.partial}, of a version no CRD given serves: {len(judgement.unserved)}"
    )
    for entry in judgement.unserved:
        print(f"    unserved: {entry}")
    groups = [
        ("accepted by both", True, True),
        ("accepted by the CRD only", True, False),
        ("accepted by the model only", False, True),
        ("refused by both", False, False),
    ]
    for title, crd_accepts, model_accepts in groups:
        found = judgement.count(crd_accepts=crd_accepts, model_accepts=model_accepts)
        print(f"  {title}: {len(found)}")
        if crd_accepts and model_accepts:
            continue
        for j in found:
            expected = " [the test expects the cluster to refuse it]" if j.expected_refused else ""
            print(f"    {j.source}{expected}")
            if j.crd_problem:
                print(f"      CRD: {j.crd_problem}")
            if j.model_problem:
                print(f"      model: {j.model_problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--crds",
        action="append",
        required=True,
        type=folder_spec,
        help="a folder of CRD YAML files, or GIT_DIR[:SUBFOLDER] (repeatable)",
    )
    parser.add_argument(
        "--documents",
        action="append",
        default=[],
        type=folder_spec,
        help="a folder of policy documents, or GIT_DIR[:SUBFOLDER] (repeatable)",
    )
    args = parser.parse_args(argv)  # fmt: skip
    crds: list[CrdVersion] = []
    with ExitStack() as stack:
        for spec in args.crds:
            crds.extend(crd_versions(stack.enter_context(given_folder(spec))))
    if not crds:
        parser.error(f"no CustomResourceDefinition in {', '.join(args.crds)}")
    drift = report_held(hold(crds), crds)
    for spec in args.documents:
        judgement = Judgement()
        with given_folder(spec) as folder:
            judge_documents(folder, crds, judgement)
        report_documents(spec, judgement)
    return 1 if drift else 0


if __name__ == "__main__":
    raise SystemExit(main())
