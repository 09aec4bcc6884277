"""Snapshot targets must lie under the snapshot roots, symlinks resolved, at every entry.

The roots themselves (workers/engine/snapshot_roots.py), the worker's own re-check
before parsing, the Python client, schedule fires, and the CLI as a user runs
it. The HTTP API is covered in tests/assay/test_api_boundaries.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from assay.client import Client
from scheduler.fires import resolve_targets
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.schedule import ScheduleTargets
from schemas.settings import load_settings
from tests.fleet_support import ROOT, make_snapshots, worker_env
from workers.engine.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots
from workers.engine.toolsets.factory import ToolsetUnavailable, build_registry
from workers.fleet.targets import snapshot_targets

ASSAY = [sys.executable, "-m", "assay.cli"]
DEMO_SCRIPT = ROOT / "examples" / "scripts" / "demo.yaml"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``root/`` with two snapshots, a symlink out to /etc, one inside, and a secret beside."""
    root = tmp_path / "root"
    make_snapshots(root, 2)
    (root / "to-etc").symlink_to("/etc")
    (root / "alias").symlink_to(root / "cluster-000")
    outside = tmp_path / "outside"
    make_snapshots(outside, 1)
    (root / "to-outside").symlink_to(outside / "cluster-000")
    return root


def roots_of(root: Path) -> SnapshotRoots:
    return SnapshotRoots.of([root], "ASSAY_SNAPSHOT_ROOTS")


# --- the rule ---------------------------------------------------------------------------------


def test_paths_inside_the_roots_resolve_to_themselves(tree: Path) -> None:
    roots = roots_of(tree)
    assert roots.confine(tree / "cluster-000") == tree / "cluster-000"
    assert roots.confine(tree / "alias") == tree / "cluster-000"  # a link within the root
    assert roots.confine(tree / "cluster-001" / ".." / "cluster-000") == tree / "cluster-000"


@pytest.mark.parametrize(
    "escape",
    ["/", "/etc", "to-etc", "to-outside", "cluster-000/../..", "../outside/cluster-000"],
)
def test_paths_that_leave_the_roots_are_refused(tree: Path, escape: str) -> None:
    target = escape if escape.startswith("/") else str(tree / escape)
    with pytest.raises(SnapshotOutsideRoots, match="ASSAY_SNAPSHOT_ROOTS"):
        roots_of(tree).confine(target)


def test_no_roots_refuse_everything_and_say_what_to_set(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASSAY_SNAPSHOT_ROOTS", raising=False)
    api = SnapshotRoots.for_api(load_settings())
    with pytest.raises(SnapshotOutsideRoots, match="allows no snapshot folders until"):
        api.confine(tree / "cluster-000")


def test_the_cli_default_is_the_working_directory(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASSAY_SNAPSHOT_ROOTS", raising=False)
    monkeypatch.chdir(tree)
    local = SnapshotRoots.for_local(load_settings())
    assert local.confine("cluster-000") == tree / "cluster-000"
    with pytest.raises(SnapshotOutsideRoots, match="the current directory"):
        local.confine(tree.parent / "outside" / "cluster-000")


def test_the_setting_reads_a_json_list_or_a_path_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSAY_SNAPSHOT_ROOTS", f"{tmp_path}/a{os.pathsep}{tmp_path}/b")
    assert load_settings().snapshot_roots == [tmp_path / "a", tmp_path / "b"]
    monkeypatch.setenv("ASSAY_SNAPSHOT_ROOTS", json.dumps([str(tmp_path / "c")]))
    assert load_settings().snapshot_roots == [tmp_path / "c"]
    monkeypatch.setenv("ASSAY_SNAPSHOT_ROOTS", "[]")
    assert load_settings().snapshot_roots == []


def test_patterns_are_confined_and_their_matches_checked_again(tree: Path) -> None:
    roots = roots_of(tree)
    assert roots.confine_pattern(str(tree / "*")) == str(tree / "*")
    for escape in ("/etc/*", str(tree / ".." / "*"), str(tree / "to-etc" / "*")):
        with pytest.raises(SnapshotOutsideRoots):
            roots.confine_pattern(escape)
    found = sorted(t.path for t in snapshot_targets(str(tree / "*"), roots))
    # the links to /etc and to the folder outside are skipped; the alias resolves inside
    assert found == sorted(
        [str(tree / "cluster-000"), str(tree / "cluster-001"), str(tree / "cluster-000")]
    )


# --- the worker re-checks before parsing -------------------------------------------------------


@pytest.mark.parametrize("escape", ["/etc", "to-etc", "to-outside"])
def test_the_worker_refuses_to_parse_a_folder_outside_its_roots(tree: Path, escape: str) -> None:
    path = escape if escape.startswith("/") else str(tree / escape)
    request = EvaluationRequest(text="every pod is ready", target=SnapshotTarget(path=path))
    settings = load_settings(snapshot_roots=[tree])
    with pytest.raises(ToolsetUnavailable, match="outside the snapshot roots"):
        build_registry(request, settings)


def test_the_worker_parses_a_folder_inside_its_roots(tree: Path) -> None:
    request = EvaluationRequest(
        text="every pod is ready", target=SnapshotTarget(path=str(tree / "cluster-001"))
    )
    registry = build_registry(request, load_settings(snapshot_roots=[tree]))
    result = registry.call("get", {"kind": "Deployment", "namespace": "prod"})
    assert result.ok and "web-ok" in result.output


def test_a_symlink_loop_inside_the_roots_is_a_clear_refusal_not_a_crash(tree: Path) -> None:
    """A loop (a -> b -> a) resolves to no folder: the worker says it cannot read it."""
    (tree / "loop-a").symlink_to(tree / "loop-b")
    (tree / "loop-b").symlink_to(tree / "loop-a")
    request = EvaluationRequest(
        text="every pod is ready", target=SnapshotTarget(path=str(tree / "loop-a"))
    )
    with pytest.raises(ToolsetUnavailable, match="does not exist or is not a folder"):
        build_registry(request, load_settings(snapshot_roots=[tree]))


# --- the Python client and schedule fires ---------------------------------------------------


def test_the_client_refuses_a_snapshot_outside_its_roots(tree: Path, redis_url: str) -> None:
    with Client(load_settings(redis_url=redis_url, snapshot_roots=[tree])) as fleet:
        with pytest.raises(SnapshotOutsideRoots):
            fleet.submit("every pod is ready", snapshot="/etc")
        with pytest.raises(SnapshotOutsideRoots):
            fleet.submit_request(
                EvaluationRequest(text="x", target=SnapshotTarget(path=str(tree / "to-etc")))
            )
        with pytest.raises(SnapshotOutsideRoots):
            fleet.start_batch("every pod is ready", snapshots="/etc/*")
        fleet.submit("every pod is ready", snapshot=str(tree / "cluster-000"))
        assert fleet.store.client.llen("assay.evaluations") == 1


def test_a_schedule_fire_skips_matches_that_leave_the_roots(tree: Path) -> None:
    settings = load_settings(snapshot_roots=[tree])
    targets = resolve_targets(ScheduleTargets(snapshots=[str(tree / "*")]), settings)
    paths = {t.path for t in targets if isinstance(t, SnapshotTarget)}
    assert paths == {str(tree / "cluster-000"), str(tree / "cluster-001")}


# --- the CLI ------------------------------------------------------------------------------------


def _assay(env: dict[str, str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASSAY, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def cli_env(redis_url: str) -> dict[str, str]:
    env = worker_env(redis_url)
    del env["ASSAY_SNAPSHOT_ROOTS"]  # the CLI's own default: the working directory
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.integration
def test_the_cli_refuses_snapshots_outside_the_working_directory(
    tree: Path, cli_env: dict[str, str]
) -> None:
    predicate = "every Deployment in namespace prod has at least 2 ready replicas"
    outside = str(tree / "cluster-000")  # tmp_path: not under the checkout we run in
    refused = [
        ("check", predicate, "--snapshot", outside, "--scripted", str(DEMO_SCRIPT)),
        ("submit", predicate, "--snapshot", outside),
        ("batch", predicate, "--snapshots", str(tree / "*")),
        ("schedule", "add", "n1", predicate, "--every", "1h", "--snapshots", str(tree / "*")),
        ("schedule", "add", "n2", predicate, "--every", "1h", "--snapshots", "/etc"),
    ]
    for args in refused:
        result = _assay(cli_env, *args)
        assert result.returncode == 64, (args, result.stdout, result.stderr)
        assert "snapshot" in result.stderr and "ASSAY_SNAPSHOT_ROOTS" in result.stderr, args
        assert "Traceback" not in result.stderr
    # run from the folder that holds it, the same snapshot is fine; a link out of it is not
    inside = _assay(
        cli_env, "check", predicate, "--snapshot", "cluster-000", "--scripted",
        str(DEMO_SCRIPT), cwd=tree,
    )  # fmt: skip
    assert inside.returncode != 64, inside.stderr
    linked = _assay(
        cli_env, "check", predicate, "--snapshot", "to-etc", "--scripted", str(DEMO_SCRIPT),
        cwd=tree,
    )  # fmt: skip
    assert linked.returncode == 64 and "outside the snapshot roots" in linked.stderr
    # and ASSAY_SNAPSHOT_ROOTS widens the CLI's roots
    widened = {**cli_env, "ASSAY_SNAPSHOT_ROOTS": str(tree)}
    submitted = _assay(widened, "submit", predicate, "--snapshot", outside)
    assert submitted.returncode == 0, submitted.stderr
