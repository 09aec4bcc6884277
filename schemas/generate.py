"""Write the JSON Schema of every contract model into ``schemas/json/``.

Run ``python -m schemas.generate`` after changing a model; ``--check`` exits 1
when the committed files differ (the drift test runs that).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from schemas.actions import PlannerResponse
from schemas.budget import Budget
from schemas.declarative import Document
from schemas.eval import EvalReport, SuiteFile
from schemas.fleet import BatchResult, BatchStatus, CheckSummary, RunProgress, VerdictChange
from schemas.notify import ChangeEventData
from schemas.probe import ProbeRecord
from schemas.report import RunReport
from schemas.request import EvaluationRequest
from schemas.schedule import Schedule
from schemas.spend import SpendEventData, SpendReport
from schemas.verdict import Verdict

JSON_DIR = Path(__file__).parent / "json"

MODELS: dict[str, Any] = {
    "planner_response": PlannerResponse,
    "evaluation_request": EvaluationRequest,
    "budget": Budget,
    "verdict": Verdict,
    "run_report": RunReport,
    "eval_suite": SuiteFile,
    "eval_report": EvalReport,
    "schedule": Schedule,
    "batch_status": BatchStatus,
    "batch_result": BatchResult,
    "check_summary": CheckSummary,
    "run_progress": RunProgress,
    "verdict_change": VerdictChange,
    "verdict_change_event": ChangeEventData,  # a webhook CloudEvent's `data`
    "probe_record": ProbeRecord,
    "spend_report": SpendReport,  # `assay spend --json`, GET /v1/spend
    "spend_event": SpendEventData,  # an assay.spend.threshold CloudEvent's `data`
    # a Check or Schedule document of `assay apply` (point an editor's YAML support at it)
    "apply_document": Document,
}


def render() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, model in MODELS.items():
        schema = TypeAdapter(model).json_schema(mode="validation")
        if name == "apply_document":
            schema["title"] = "assay apply document (Check or Schedule)"
        out[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    rendered = render()
    drifted = []
    for filename, text in rendered.items():
        path = JSON_DIR / filename
        current = path.read_text() if path.exists() else None
        if current != text:
            drifted.append(filename)
            if not check:
                JSON_DIR.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    stale = sorted(p.name for p in JSON_DIR.glob("*.schema.json") if p.name not in rendered)
    if check:
        if drifted or stale:
            print("schema drift: " + ", ".join(drifted + stale), file=sys.stderr)
            print("run `python -m schemas.generate` and commit schemas/json/", file=sys.stderr)
            return 1
        return 0
    for name in stale:
        (JSON_DIR / name).unlink()
    print(f"wrote {len(rendered)} schema files to {JSON_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
