"""Verdicts as JUnit XML, the test report format CI systems show natively.

`--format junit` of `assay check`, `assay batch` and `assay report` prints one
``<testcase>`` per (check, target), grouped in one ``<testsuite>`` inside
``<testsuites>``, as Jenkins, GitLab, GitHub Actions reporters and the Ant
JUnit task read it:

* ``true``: a passed test case;
* ``false``: a ``<failure>`` (type ``false``), the explanation as its message;
* ``cannot_determine`` and ``poorly_posed``: an ``<error>`` whose type is the verdict
  and whose message is the reason (or, without one, the explanation);
* no verdict yet: ``<skipped>``.

Every case's ``<system-out>`` holds the explanation and the evidence (each cited
lookup and excerpt), the check id, run id, source and usage. Text is stripped of the
characters XML 1.0 cannot carry (a model's words may hold any). The ``<testsuite>`` and
the ``<testsuites>`` root both carry the totals (``tests``, ``failures``, ``errors``,
``skipped``, ``time``).

A command that prints JUnit exits with the verdicts' code, never 0 for a failure:
:func:`exit_code` (``assay report``; ``assay check`` has one verdict; `assay batch`
gives the same order from its tally, and 75 while targets are pending).
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.exit_codes import every_one_holds
from schemas.verdict import EXIT_CODES, Verdict, VerdictKind

NAME_CHARS = 200
MESSAGE_CHARS = 1000
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class Case:
    """One test case: a check on a target, with its verdict (None while it has none)."""

    check_id: str
    target: str
    predicate: str
    verdict: Verdict | None
    name: str | None = None  # a declared check's or schedule's name, when there is one
    # A batch row's verdict and explanation, for a run whose full verdict is no longer kept
    # (only read when ``verdict`` is None).
    row_verdict: VerdictKind | None = None
    row_explanation: str | None = None

    @property
    def kind(self) -> VerdictKind | None:
        return self.verdict.verdict if self.verdict is not None else self.row_verdict


def clean(text: str) -> str:
    return _NOT_XML.sub("", text)


def _cut(text: str, limit: int) -> str:
    text = clean(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _system_out(case: Case) -> str:
    verdict = case.verdict
    lines = [f"predicate: {case.predicate}", f"check_id: {case.check_id}", f"target: {case.target}"]
    if verdict is None and case.row_verdict is not None:
        kind = case.row_verdict
        lines += [
            f"verdict: {kind.value} (exit {EXIT_CODES[kind]}); its full verdict is no longer kept",
            "",
            "explanation:",
            case.row_explanation or "(no longer kept)",
        ]
        return clean("\n".join(lines))
    if verdict is None:
        lines.append("verdict: none yet")
        return clean("\n".join(lines))
    lines += [
        f"verdict: {verdict.verdict.value} (exit {verdict.exit_code})",
        f"run_id: {verdict.run_id}",
        f"source: {verdict.source}, model {verdict.model}, profile {verdict.profile}",
        f"usage: {verdict.usage.total_tokens} tokens, {verdict.iterations} iterations, "
        f"{verdict.duration_seconds:.2f}s",
    ]
    if verdict.reason:
        lines.append(f"reason: {verdict.reason}")
    lines += ["", "explanation:", verdict.explanation or "(none)"]
    if verdict.evidence:
        lines += ["", "evidence:"]
        for item in verdict.evidence:
            args = " ".join(f"{k}={v}" for k, v in sorted(item.arguments.items()))
            status = "verified" if item.verified else "not verified"
            lines.append(f"- step {item.step} {item.tool} {args} ({status}): {item.excerpt}")
    if verdict.findings:
        lines += ["", "findings:", *(f"- {finding}" for finding in verdict.findings)]
    return clean("\n".join(lines))


def _testcase(parent: ET.Element, case: Case) -> str:
    """Add ``case`` to ``parent``; returns its outcome: passed, failure, error or skipped."""
    verdict = case.verdict
    title = f"{case.name or case.check_id}: {case.predicate}"
    element = ET.SubElement(
        parent,
        "testcase",
        {
            "name": _cut(title, NAME_CHARS),
            "classname": _cut(f"assay.{case.target}", NAME_CHARS),
            "time": f"{verdict.duration_seconds:.3f}" if verdict else "0",
        },
    )
    outcome = "passed"
    if verdict is None and case.row_verdict is not None:
        outcome = _row_outcome(element, case.row_verdict, case.row_explanation)
    elif verdict is None:
        ET.SubElement(element, "skipped", {"message": "no verdict yet"})
        outcome = "skipped"
    elif verdict.verdict == VerdictKind.FALSE:
        failure = ET.SubElement(
            element,
            "failure",
            {"message": _cut(verdict.explanation or "false", MESSAGE_CHARS), "type": "false"},
        )
        failure.text = clean(verdict.explanation)
        outcome = "failure"
    elif verdict.verdict in (VerdictKind.CANNOT_DETERMINE, VerdictKind.POORLY_POSED):
        reason = verdict.reason or verdict.explanation or verdict.verdict.value
        error = ET.SubElement(
            element,
            "error",
            {"message": _cut(reason, MESSAGE_CHARS), "type": verdict.verdict.value},
        )
        error.text = clean("\n".join(t for t in (verdict.reason, verdict.explanation) if t))
        outcome = "error"
    ET.SubElement(element, "system-out").text = _system_out(case)
    return outcome


def _row_outcome(element: ET.Element, kind: VerdictKind, explanation: str | None) -> str:
    """A case from a batch row alone: the verdict's outcome, the row's explanation as its
    message."""
    if kind == VerdictKind.TRUE:
        return "passed"
    message = explanation or kind.value
    tag, outcome = ("failure", "failure") if kind == VerdictKind.FALSE else ("error", "error")
    child = ET.SubElement(
        element, tag, {"message": _cut(message, MESSAGE_CHARS), "type": kind.value}
    )
    child.text = clean(message)
    return outcome


def render(cases: Sequence[Case], suite: str = "assay", now: datetime | None = None) -> str:
    """``cases`` as one JUnit XML document (UTF-8, with its declaration)."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    total_time = sum(c.verdict.duration_seconds for c in cases if c.verdict is not None)
    root = ET.Element("testsuites", {"name": "assay"})
    element = ET.SubElement(
        root,
        "testsuite",
        {
            "name": _cut(suite, NAME_CHARS),
            "timestamp": moment.strftime("%Y-%m-%dT%H:%M:%S"),
            "hostname": _cut(socket.gethostname() or "localhost", NAME_CHARS),
        },
    )
    counts = {"passed": 0, "failure": 0, "error": 0, "skipped": 0}
    for case in cases:
        counts[_testcase(element, case)] += 1
    totals = {
        "tests": str(len(cases)),
        "failures": str(counts["failure"]),
        "errors": str(counts["error"]),
        "skipped": str(counts["skipped"]),
        "time": f"{total_time:.3f}",
    }
    for key, value in totals.items():
        element.set(key, value)
    for key in ("tests", "failures", "errors", "skipped", "time"):
        root.set(key, totals[key])
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def case_of(verdict: Verdict, predicate: str, name: str | None = None) -> Case:
    return Case(verdict.check_id, verdict.target, predicate, verdict, name)


def exit_code(cases: Sequence[Case]) -> int:
    """The code of "every case holds": 1 when one is false, else 2 when one is poorly
    posed, else 3 when one could not be determined or has no verdict (or there is none),
    0 only when every one is true."""
    kinds = [case.kind for case in cases]
    return every_one_holds(
        false=kinds.count(VerdictKind.FALSE),
        poorly_posed=kinds.count(VerdictKind.POORLY_POSED),
        all_true=bool(kinds) and set(kinds) == {VerdictKind.TRUE},
    )
