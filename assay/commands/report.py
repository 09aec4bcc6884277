"""`assay report`: the latest verdicts as PolicyReports or JUnit XML, for the tools teams read.

``--format policyreport`` (the default) prints, for each target (or the one
``--target`` names), a cluster report and one report per namespace holding results,
as ``wgpolicyk8s.io/v1alpha2`` PolicyReport / ClusterPolicyReport, or with
``--openreports`` as ``openreports.io/v1alpha1`` Report / ClusterReport: the documents
the ``policyreport`` sink writes for the same store (notifier/policy_reports.py says what
goes in them). ``--exclude-namespaces`` leaves out imported policies' results about
objects in those namespaces (default: those Kyverno's default resource filters skip).
``--format junit`` prints one JUnit test case per check and target (assay/junit.py).

Exit codes: ``policyreport``: 0 printed (the documents say pass or fail); ``junit``: the
verdicts' code, as `assay batch` gives it (0 only when every check is true, else 1 when
one is false, 2 when one is poorly posed, 3 otherwise); both: 64 a wrong command line, 66
no verdict (on that target), 69 the fleet's Redis cannot be reached.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from assay.commands.fleet_common import fail, fleet_client
from schemas.exit_codes import EXIT_UNKNOWN, EXIT_USAGE
from schemas.report_scope import DEFAULT_EXCLUDED_NAMESPACES


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
    exclude_namespaces: Annotated[
        str | None,
        typer.Option(
            "--exclude-namespaces",
            help="Comma-separated namespaces (* wildcards) whose objects an imported "
            "policy's results leave out; default "
            f"{','.join(DEFAULT_EXCLUDED_NAMESPACES)} (what Kyverno's default resource "
            "filters skip); '' keeps every namespace.",
        ),
    ] = None,
) -> None:
    """The latest verdict of every check as PolicyReports (per target and namespace) or JUnit."""
    from notifier.policy_reports import documents_by_target, gather

    if output_format not in ("policyreport", "junit"):
        fail(f"--format must be policyreport or junit, not {output_format!r}", EXIT_USAGE)
    if openreports and output_format != "policyreport":
        fail("--openreports goes with --format policyreport", EXIT_USAGE)
    if exclude_namespaces is not None and output_format != "policyreport":
        fail("--exclude-namespaces goes with --format policyreport", EXIT_USAGE)
    excluded = (
        list(DEFAULT_EXCLUDED_NAMESPACES)
        if exclude_namespaces is None
        else [p.strip() for p in exclude_namespaces.split(",") if p.strip()]
    )
    with fleet_client() as client:
        checks = gather(client.store, target)
    if not checks:
        where = f" on target {target!r}" if target is not None else ""
        fail(f"no check has a verdict{where}; `assay checks` lists them", EXIT_UNKNOWN)
    if output_format == "junit":
        from assay import junit

        cases = [
            junit.Case(c.check_id, c.target, c.predicate, c.verdict, c.policy)
            for c in sorted(checks, key=lambda c: (c.target, c.policy, c.check_id))
        ]
        sys.stdout.write(junit.render(cases, "assay report"))
        raise typer.Exit(junit.exit_code(cases))
    import yaml

    from assay.apply import as_yaml
    from assay.terminal_text import print_block

    by_target = documents_by_target(
        checks, "openreports" if openreports else "wgpolicyk8s", excluded
    )
    documents = [document for found in by_target.values() for document in found]
    if documents:
        # libyaml's emitter where PyYAML has it: a fleet's reports run to megabytes, which
        # the pure-Python one is slow at (3.3 MB of reports: 29 s, against 4.5 s)
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        print_block(as_yaml(documents, separated=False, dumper=dumper))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
