"""`assay spend`: what the fleet, each schedule and each batch spent, by UTC day.

    assay spend                      # the last 7 UTC days, newest first
    assay spend --days 30 --schedule nightly-root
    assay spend --json               # what GET /v1/spend answers

It prints the fleet's current hour and day against its ceilings, then one row per
scope and day: tokens, cost, model calls, calls a ceiling stopped, schedule fires
skipped, and each ceiling with what is left of it (docs/fleet.md, "Spend guard").
"""

from __future__ import annotations

from typing import Annotated

import typer

from assay.commands.fleet_common import WideOpt, dump_json, fleet_client, stdout_console


def spend(
    days: Annotated[
        int, typer.Option("--days", min=1, max=400, help="UTC days to show, today included.")
    ] = 7,
    schedule: Annotated[
        str | None, typer.Option("--schedule", help="Only this schedule (id or name).")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as the API does (GET /v1/spend).")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Spend by schedule and UTC day, against the spend ceilings."""
    with fleet_client() as client:
        report = client.spend_report(days, schedule)
    if json_output:
        print(dump_json(report))
        return
    from assay.fleet_render import render_spend

    render_spend(report, stdout_console(), wide=wide)


def register(app: typer.Typer) -> None:
    app.command("spend")(spend)
