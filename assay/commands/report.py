"""`assay report`: the latest verdicts as PolicyReports or JUnit XML, for the tools teams read.

``--format policyreport`` (the default) prints, for each target (or the one
``--target`` names), a cluster report and one report per namespace holding results,
as ``wgpolicyk8s.io/v1alpha2`` PolicyReport / ClusterPolicyReport, or with
``--openreports`` as ``openreports.io/v1alpha1`` Report / ClusterReport
(notifier/policy_reports.py says what goes in them). ``--format junit`` prints one
JUnit test case per check and target (assay/junit.py). Exit codes: 0 printed
(whatever the verdicts), 64 a wrong command line, 66 no verdict on that target,
69 the fleet's Redis cannot be reached.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from assay.commands.fleet_common import fail, fleet_client
from schemas.exit_codes import EXIT_UNKNOWN, EXIT_USAGE


def report(
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="policyreport (PolicyReport documents, YAML) or junit (JUnit XML for CI).",
        ),
    ] = "policyreport",
    target: Annotated[
        str | None,
        typer.Option("--target", help="Only this target (a context, or a snapshot's name)."),
    ] = None,
    openreports: Annotated[
        bool,
        typer.Option(
            "--openreports",
            help="openreports.io/v1alpha1 Report / ClusterReport instead of "
            "wgpolicyk8s.io/v1alpha2 PolicyReport / ClusterPolicyReport.",
        ),
    ] = False,
) -> None:
    """The latest verdict of every check as PolicyReports (per target and namespace) or JUnit."""
    from notifier.policy_reports import documents_by_target, gather

    if output_format not in ("policyreport", "junit"):
        fail(f"--format must be policyreport or junit, not {output_format!r}", EXIT_USAGE)
    if openreports and output_format != "policyreport":
        fail("--openreports goes with --format policyreport", EXIT_USAGE)
    with fleet_client() as client:
        checks = gather(client.store, target)
    if target is not None and not checks:
        fail(
            f"no check has a verdict on target {target!r}; `assay checks` lists them", EXIT_UNKNOWN
        )
    if output_format == "junit":
        from assay import junit

        cases = [
            junit.Case(c.check_id, c.target, c.predicate, c.verdict, c.policy)
            for c in sorted(checks, key=lambda c: (c.target, c.policy, c.check_id))
        ]
        sys.stdout.write(junit.render(cases, "assay report"))
        return
    from assay.apply import as_yaml

    by_target = documents_by_target(checks, "openreports" if openreports else "wgpolicyk8s")
    documents = [document for found in by_target.values() for document in found]
    if documents:
        sys.stdout.write(as_yaml(documents))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
