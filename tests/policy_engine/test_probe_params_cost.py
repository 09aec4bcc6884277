"""A large ``params`` over many objects (workers/policy_engine/probes/run_constants.py): what every
object reads of it is computed once per run, and what each evaluation still converts is
charged, so the run ends with a verdict within its time budget, or is refused before the
first object, never stopped by its deadline after minutes of conversions.

2 MB of params over 3,000 Deployments: each object converted the whole params again
(82-120 s, stopped only by the deadline). The deadline here is the run's own, as a re-run
has; the pytest timeout is the hang guard.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.probe import ProbeOrigin, ProposedProbe
from schemas.request import SnapshotTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from workers.engine.toolsets.factory import backend_for
from workers.policy_engine.probes.runner import run_probe

pytestmark = pytest.mark.timeout(240)

OBJECTS = 3000
RUN_SECONDS = 60  # the run's deadline: a few seconds of work, with room for a loaded host
# ~2 MB of params: a long list nobody reads per object, and the short one each object reads
PARAMS: dict[str, Any] = {
    "spec": {
        "catalogue": [
            {"name": f"image-{i:06d}", "digest": "sha256:" + "0" * 48} for i in range(20_000)
        ],
        "allowed": ["example/app", "example/px"],
        "exempt": {"names": ["web-00007"]},
    }
}


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("params") / "snap"
    (folder / "prod").mkdir(parents=True)
    objects = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"web-{i:05d}", "namespace": "prod"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "app", "image": "example/app:1"},
                            {"name": "proxy", "image": "example/px:1" if i != 42 else "evil/px:1"},
                        ]
                    }
                }
            },
        }
        for i in range(OBJECTS)
    ]
    (folder / "prod" / "deployments.yaml").write_text(yaml.safe_dump_all(objects))
    return folder


def _run(snapshot: Path, validation: str, variables: list[dict[str, str]]) -> Any:
    probe = ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "Deployment", "namespace": "prod"}}],
            "scope": "each_object",
            "variables": variables,
            "validations": [{"expression": validation, "message": "not allowed"}],
            "params": PARAMS,
            "empty_result": "pass",
            "origin": ProbeOrigin(format="vap", name="allowed-images", source="-"),
        }
    )
    backend = backend_for(SnapshotTarget(path=str(snapshot)), load_settings())
    try:
        return run_probe(probe, backend, deadline=time.monotonic() + RUN_SECONDS)
    finally:
        backend.close()


def test_what_every_object_reads_of_large_params_is_computed_once(snapshot: Path) -> None:
    assert len(yaml.safe_dump(PARAMS)) > 1_500_000
    run = _run(
        snapshot,
        "object.metadata.name in variables.exempt || object.spec.template.spec.containers.all("
        "c, params.spec.allowed.exists(a, c.image.startsWith(a + ':')))",
        [{"name": "exempt", "expression": "params.spec.exempt.names"}],
    )
    assert run.error is None and run.budget_exhausted is None, run.error
    assert run.verdict == VerdictKind.FALSE and run.judged_total == OBJECTS
    assert [v.name for v in run.violations] == ["web-00042"]


def test_reading_large_params_for_every_object_is_refused_before_the_first(
    snapshot: Path,
) -> None:
    run = _run(
        snapshot,
        "!params.spec.catalogue.exists(i, i.name == object.metadata.name)",
        [],
    )
    assert run.verdict is None and run.budget_exhausted is None
    assert run.error is not None and f"each of the {OBJECTS:,} objects" in run.error


def test_a_constant_part_is_costed_once_not_for_every_object(snapshot: Path) -> None:
    """Filtering 100 params entries copies the growing list for each (about 5,000 steps):
    done once for the run it fits the bound; charged again for each of 3,000 objects
    (15,000,000 steps) the run would be refused."""
    params = {"spec": {"images": [f"example/app:{i}" for i in range(99)] + ["example/px:1"]}}
    probe = ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "Deployment", "namespace": "prod"}}],
            "scope": "each_object",
            "validations": [
                {
                    "expression": "object.spec.template.spec.containers.all(c, c.image in "
                    "params.spec.images.filter(i, i.startsWith('example/')))",
                    "message": "not allowed",
                }
            ],
            "params": params,
            "empty_result": "pass",
            "origin": ProbeOrigin(format="vap", name="listed-images", source="-"),
        }
    )
    backend = backend_for(SnapshotTarget(path=str(snapshot)), load_settings())
    try:
        run = run_probe(probe, backend, deadline=time.monotonic() + RUN_SECONDS)
    finally:
        backend.close()
    assert run.error is None, run.error
    assert run.verdict == VerdictKind.FALSE and [v.name for v in run.violations] == ["web-00042"]
