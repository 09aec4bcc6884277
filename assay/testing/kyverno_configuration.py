"""Which PolicyExceptions the Kyverno that labelled a conformance test applied.

Kyverno's conformance workflow (``.github/workflows/tests-conformance.yaml`` of its
repository) runs each folder of ``test/conformance/chainsaw`` (a job's ``tests-path``) on a
Kyverno installed from its chart (``charts/kyverno/values.yaml``) with the values of
``scripts/config/NAME/kyverno.yaml`` for each NAME of the job's ``kyverno-configs``, later
names over earlier ones. Whether that Kyverno applies PolicyExceptions is
``features.policyExceptions`` (``enabled``, ``namespace``), so a label is judged with what
the engine was configured with when it gave it, not with assay's own default.

A folder no job names, a job whose folder or configuration comes from a matrix that does not
settle it, or a checkout without those files: nothing is said (the caller keeps assay's
default, applying every exception).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workers.policy_engine.policies.kyverno_exceptions import Acceptance

WORKFLOW = Path(".github/workflows/tests-conformance.yaml")
CHART_VALUES = Path("charts/kyverno/values.yaml")
CONFIGS = Path("scripts/config")
# what a fetched repository must give beside its tests for this reading (bench/bench_cel.py)
CONFIGURATION_PATHS = (WORKFLOW, CHART_VALUES, CONFIGS)
_CHAINSAW = Path("test/conformance/chainsaw")


def repository_of(chainsaw_root: Path) -> Path | None:
    """The Kyverno checkout holding ``chainsaw_root`` (its conformance tests folder, or one
    folder of it), when its workflow is there too."""
    for folder in (chainsaw_root, *chainsaw_root.parents):
        if (folder / WORKFLOW).is_file() and (folder / _CHAINSAW).is_dir():
            return folder
    return None


@dataclass(frozen=True)
class Conformance:
    """The conformance configuration of the Kyverno checkout holding a library, if any."""

    repository: Path | None = None
    by_folder: dict[str, Acceptance] = field(default_factory=dict)

    @classmethod
    def of(cls, root: Path) -> Conformance:
        repository = repository_of(root)
        return cls(repository, exceptions_by_folder(repository) if repository else {})

    def exceptions_for(self, test: Path) -> Acceptance:
        """Which PolicyExceptions the Kyverno that ran the conformance test ``test`` applied
        (assay's default where its configuration does not say)."""
        if self.repository is None:
            return Acceptance()
        try:
            folder = test.relative_to(self.repository / _CHAINSAW).parts[0]
        except (ValueError, IndexError):
            return Acceptance()
        return self.by_folder.get(folder, Acceptance())


def exceptions_by_folder(repository: Path) -> dict[str, Acceptance]:
    """For each conformance folder (``tests-path``) a job of the workflow settles: which
    PolicyExceptions its Kyverno applies."""
    workflow = _yaml(repository / WORKFLOW)
    chart = _features(_yaml(repository / CHART_VALUES))
    out: dict[str, Acceptance] = {}
    jobs = workflow.get("jobs") if isinstance(workflow, dict) else None
    for job in (jobs or {}).values():
        if not isinstance(job, dict):
            continue
        for step in job.get("steps") or []:
            given = step.get("with") if isinstance(step, dict) else None
            if not isinstance(given, dict) or "tests-path" not in given:
                continue
            folder = str(given["tests-path"])
            choices = _config_choices(str(given.get("kyverno-configs") or ""), job)
            if "${{" in folder or not choices:
                continue
            settled = {_acceptance(repository, chart, names) for names in choices}
            if len(settled) == 1:
                out[folder] = settled.pop()
    return out


def _config_choices(text: str, job: dict[str, Any]) -> list[list[str]]:
    """The lists of configuration names a job may install: one, or one per value of the
    matrix its ``kyverno-configs`` names."""
    if "${{" not in text:
        return [[n.strip() for n in text.split(",") if n.strip()]]
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    values = matrix.get("kyverno-configs") if isinstance(matrix, dict) else None
    if not isinstance(values, list):
        return []
    return [[n.strip() for n in str(v).split(",") if n.strip()] for v in values]


def _acceptance(repository: Path, chart: dict[str, Any], names: list[str]) -> Acceptance:
    features = dict(chart)
    for name in names:
        features.update(_features(_yaml(repository / CONFIGS / name / "kyverno.yaml")))
    return Acceptance(
        enabled=features.get("enabled") is True, namespace=str(features.get("namespace") or "")
    )


def _features(values: Any) -> dict[str, Any]:
    """``features.policyExceptions`` of a values file, the keys it sets."""
    features = values.get("features") if isinstance(values, dict) else None
    found = features.get("policyExceptions") if isinstance(features, dict) else None
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if k in ("enabled", "namespace")}


def _yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
