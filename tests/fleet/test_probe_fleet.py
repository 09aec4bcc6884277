"""Probes through the fleet: a real redis-server, a real `celery worker` process, the scripted
model proposing a probe. The second run of a check and a batch's later targets are answered by
the probe, without a model call."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.client import Client
from assay.testing.scripted_model import ScriptedModel
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.fleet_support import (
    NO_CONFIRMER_PROFILE,
    PREDICATE,
    make_snapshots,
    scripted_worker,
    wait_until,
)
from tests.probe_support import fleet_script_with_probe

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[ScriptedModel]:
    with ScriptedModel(fleet_script_with_probe()) as model:
        yield model


@pytest.fixture
def worker(
    redis_url: str, scripted_model: ScriptedModel, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    # One run at a time, so a batch's first target compiles before the others start.
    with scripted_worker(redis_url, scripted_model.url, tmp_path / "worker.log", 1) as process:
        yield process


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client(load_settings(redis_url=redis_url)) as fleet:
        yield fleet


def test_second_run_of_a_check_is_the_probes(
    client: Client, worker: subprocess.Popen[bytes], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    (folder,) = make_snapshots(tmp_path / "snaps", 1)
    first = client.submit(PREDICATE, snapshot=str(folder))
    compiled = client.wait(first.run_id, timeout=90)
    assert compiled.verdict == VerdictKind.TRUE and compiled.source == "model"
    assert compiled.probe_version == 1

    second = client.submit(PREDICATE, snapshot=str(folder))
    rerun = client.wait(second.run_id, timeout=90)
    assert rerun.verdict == VerdictKind.TRUE and rerun.source == "probe"
    assert rerun.usage.total_tokens == 0
    assert scripted_model.requests_for(second.run_id) == []
    assert client.checks(target="snapshot:cluster-000")[0].check_id == first.check_id

    third = client.submit(PREDICATE, snapshot=str(folder), probe="off")
    by_model = client.wait(third.run_id, timeout=90)
    assert by_model.source == "model" and scripted_model.requests_for(third.run_id)


def test_batch_compiles_on_its_first_target_and_probes_the_rest(
    client: Client,
    worker: subprocess.Popen[bytes],
    scripted_model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_snapshots(tmp_path / "snaps", 6, bad_every=3)  # cluster-000 and -003 are unready
    monkeypatch.chdir(tmp_path)  # the batch glob must lie under the snapshot roots (the cwd)
    batch_id = client.start_batch(PREDICATE, snapshots="snaps/*", profile=NO_CONFIRMER_PROFILE)
    assert wait_until(lambda: (s := client.batch_status(batch_id)) is not None
                      and s.pending == 0, timeout=120)  # fmt: skip
    results = list(client.batch_results(batch_id))
    verdicts = {r.target: client.verdict(r.run_id) for r in results}
    sources = sorted(v.source for v in verdicts.values() if v is not None)
    assert sources == ["model"] + ["probe"] * 5
    falses = sorted(t for t, v in verdicts.items() if v and v.verdict == VerdictKind.FALSE)
    assert falses == ["snapshot:cluster-000", "snapshot:cluster-003"]
    asked = [r.run_id for r in results if scripted_model.requests_for(r.run_id)]
    assert len(asked) == 1
