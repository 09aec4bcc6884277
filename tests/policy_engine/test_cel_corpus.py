"""assay's own CEL corpus (tests/fixtures/cel_corpus/): policies in every supported format,
each with labelled one-object fixtures, covering the CEL real policies write (optional types,
strings, lists, sets, regex, url, ip/cidr, quantity, semver, variables, match conditions,
params, message expressions). Imported as `assay probe import` does and run as a check:
every fixture gets a value, every value agrees with its label, and every policy exports to
an admission policy that passes the export's checks. bench/bench_cel.py prints the figures
(and times them) for this corpus or any policy library."""

from __future__ import annotations

from pathlib import Path

from assay.testing.policy_corpus import Judge, evaluate, iter_disagreements, read_library

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "cel_corpus"


def test_every_fixture_gets_a_value_that_agrees_and_every_policy_exports() -> None:
    reading = read_library(CORPUS)
    topics = {Path(f.policy_files[0]).parent.name for f in reading.fixtures}
    assert len(reading.fixtures) >= 100 and len(topics) >= 14
    figures = evaluate(reading.fixtures, reading.skipped)
    missing = [(j.fixture.name, j.reason) for j in figures.judgements if j.value is None]
    assert missing == []
    assert list(iter_disagreements(figures)) == []
    labels = {j.fixture.label for j in figures.judgements}
    assert {"pass", "fail", "skip", "yes", "no"} <= labels  # both outcomes, and not judged
    for fmt, (valid, tried) in figures.exports.items():
        assert tried >= 9 and valid == tried, (fmt, figures.export_problems)
    # an update request judges no stored object: left out, and said so
    assert reading.skipped == {"a Gatekeeper case judging an update or deletion request": 1}


def test_every_document_of_the_corpus_imports_without_a_refusal() -> None:
    """Each file set imports whole: no policy, binding or params object is refused (a
    paramRef Kubernetes ignores refuses nothing, params-ignored/)."""
    reading = read_library(CORPUS)
    judge = Judge()
    refused = {
        source: refusals
        for source in {(f.policy_files, f.exceptions) for f in reading.fixtures}
        for refusals in [judge.policies(source)[1]]
        if refusals
    }
    assert refused == {}
