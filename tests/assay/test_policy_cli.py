"""`assay probe import|policies` and the policy:NAME / policy-set:NAME forms of
`assay probe show|test|export|drop`, as a user types them, on a real redis-server; and the
fleet commands refusing a policy that is not imported."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.cli_support import run_cli as run
from workers.fleet.policy_store import PolicyStore
from workers.fleet.redis_client import connect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "policies"


@pytest.fixture
def store(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> PolicyStore:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(EXAMPLES, tmp_path / "policies")
    shutil.copytree(ROOT / "examples" / "snapshots", tmp_path / "snapshots")
    return PolicyStore(connect(redis_url), prefix="assay")


def _import_examples(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    files = sorted(str(p) for p in Path("policies").glob("*.yaml"))
    return run(capsys, "probe", "import", *files, *extra)


def test_import_stores_each_policy_and_the_set(
    capsys: pytest.CaptureFixture[str], store: PolicyStore
) -> None:
    code, out, err = _import_examples(capsys, "--set", "baseline")
    assert code == 0, err
    assert "imported policy:trusted-registries: vap, 1 rule, judges deployments" in out
    assert "imported policy:prod-workloads-labelled: gatekeeper" in out
    assert "policy set baseline: 3 policies (run it as the check policy-set:baseline)" in out
    assert store.set_members("baseline") == [
        "prod-workloads-labelled",
        "run-as-non-root",
        "trusted-registries",
    ]
    code, out, _ = _import_examples(capsys)
    assert code == 0 and out.count("(replaced)") == 3

    code, out, _ = run(capsys, "probe", "policies")
    assert code == 0
    assert "policy:run-as-non-root  kyverno-validatingpolicy, 3 rules" in out
    assert "policy-set:baseline  3 policies" in out
    code, out, _ = run(capsys, "probe", "show", "policy:run-as-non-root")
    assert (
        code == 0 and "rule run-as-non-root-autogen-defaults (Kyverno's pod-controller form" in out
    )
    assert "match condition not-kube-system" in out


def test_refusals_are_named_and_exit_65_while_the_rest_is_imported(
    capsys: pytest.CaptureFixture[str], store: PolicyStore, tmp_path: Path
) -> None:
    bad = tmp_path / "old-object.yaml"
    policy = yaml.safe_load((EXAMPLES / "kyverno-run-as-non-root.yaml").read_text())
    policy["metadata"]["name"] = "compares-old"
    policy["spec"]["validations"][0]["expression"] = "request.userInfo.username != ''"
    bad.write_text(yaml.safe_dump(policy))
    code, out, _ = _import_examples(capsys, str(bad), "--json")
    assert code == 65
    assert '"imported": [' in out and '"compares-old"' in out and "it reads request.userInfo" in out
    assert store.get("compares-old") is None and store.get("run-as-non-root") is not None

    code, out, _ = run(capsys, "probe", "import", str(bad), "--dry-run")
    assert code == 65 and "refused ValidatingPolicy compares-old" in out
    unreadable = tmp_path / "broken.yaml"
    unreadable.write_text("kind: [")
    code, _, err = run(capsys, "probe", "import", str(unreadable), "--set", "x")
    assert code == 64 and "broken.yaml is not YAML or JSON" in err and "nothing was imported" in err
    code, _, err = run(capsys, "probe", "import", str(bad), "--set", "Bad_Name")
    assert code == 64 and "cannot name a policy set" in err


def test_import_reads_only_a_regular_file(
    capsys: pytest.CaptureFixture[str], store: PolicyStore, tmp_path: Path
) -> None:
    """`probe import /dev/zero` read until memory ran out; a FIFO blocked for ever."""
    import os

    os.mkfifo(tmp_path / "fifo.yaml")
    for name in ("/dev/zero", str(tmp_path / "fifo.yaml")):
        code, _, err = run(capsys, "probe", "import", name)
        assert code == 64, err
        assert f"{name} is not a regular file; nothing was imported" in err
    assert store.names() == []


DEV_AP = "snapshots/dev-ap"


def test_a_set_is_imported_whole_or_left_as_it_was(
    capsys: pytest.CaptureFixture[str], store: PolicyStore
) -> None:
    """One policy of a set changed in git into something the import refuses: the set must
    not quietly lose it (the set's check would no longer judge what that policy judges:
    dev-ap's pods that run as root). Nothing of the set is stored; exit 65 names the
    refusal, and the set stays as it was."""
    assert _import_examples(capsys, "--set", "baseline")[0] == 0
    code, _, _ = run(capsys, "probe", "test", "policy-set:baseline", "--snapshot", DEV_AP)
    assert code == 1  # run-as-non-root fails there
    edited = Path("policies") / "kyverno-run-as-non-root.yaml"
    policy = yaml.safe_load(edited.read_text())
    policy["spec"]["validations"][0]["expression"] = "request.userInfo.username != ''"
    edited.write_text(yaml.safe_dump(policy))
    before = store.get("trusted-registries")
    code, out, _ = _import_examples(capsys, "--set", "baseline")
    assert code == 65, out
    assert "refused ValidatingPolicy run-as-non-root" in out
    assert "policy set baseline unchanged" in out
    assert store.set_members("baseline") == [
        "prod-workloads-labelled",
        "run-as-non-root",
        "trusted-registries",
    ]
    assert store.get("trusted-registries") == before  # not even the others
    code, _, _ = run(capsys, "probe", "test", "policy-set:baseline", "--snapshot", DEV_AP)
    assert code == 1


def test_a_policy_another_set_holds_is_refused_from_a_set_import(
    capsys: pytest.CaptureFixture[str], store: PolicyStore, tmp_path: Path
) -> None:
    """Imported into a second set, a policy replaced the first set's silently: that set's
    check judged by the other team's rules from then on. Refused (65) with one sentence
    naming the set, nothing stored; `assay apply` refuses it the same way (64)."""
    one = "policies/kyverno-run-as-non-root.yaml"
    assert run(capsys, "probe", "import", one, "--set", "team-a")[0] == 0
    before = store.get("run-as-non-root")
    code, out, _ = run(capsys, "probe", "import", one, "--set", "team-b")
    assert code == 65, out
    assert (
        "refused kyverno-validatingpolicy run-as-non-root (policies/kyverno-run-as-non-root.yaml)"
        ": it already belongs to policy set 'team-a': import it into that set, or drop "
        "policy:run-as-non-root first to move it to 'team-b'"
    ) in out
    assert store.sets() == {"team-a": ["run-as-non-root"]}
    assert store.get("run-as-non-root") == before
    document = (
        "apiVersion: assay.dev/v1alpha1\nkind: Check\nmetadata: {name: b}\nspec:\n"
        f"  policy: {{file: {Path(one).name}, set: team-b}}\n"
        "  targets: {snapshots: [../snapshots/prod-eu]}\n"
    )
    (Path("policies") / "check.yaml").write_text(document)
    code, _, err = run(capsys, "apply", "-f", "policies/check.yaml", "--source", "b")
    assert code == 64, err
    assert "spec.policy.file: kyverno-validatingpolicy 'run-as-non-root' cannot be imported: " \
        "it already belongs to policy set 'team-a'" in err  # fmt: skip
    assert store.sets() == {"team-a": ["run-as-non-root"]}


def test_test_runs_a_policy_or_a_set_on_a_snapshot(
    capsys: pytest.CaptureFixture[str], store: PolicyStore
) -> None:
    _import_examples(capsys, "--set", "baseline")
    code, out, _ = run(
        capsys, "probe", "test", "policy:run-as-non-root", "--snapshot", "snapshots/dev-ap"
    )
    assert code == 1
    assert "policy:run-as-non-root  false  (6 judged, 2 violate it)" in out
    assert "Deployment dev/debug-tools: runs as root (runAsUser 0): shell" in out
    code, out, _ = run(
        capsys, "probe", "test", "policy-set:baseline", "--snapshot", "snapshots/prod-eu"
    )
    assert code == 0 and out.count("  true  ") == 3
    assert "listings: 7 list request(s) for 3 policies" in out


def test_export_and_drop(capsys: pytest.CaptureFixture[str], store: PolicyStore) -> None:
    _import_examples(capsys, "--set", "baseline")
    code, out, _ = run(capsys, "probe", "export", "policy:trusted-registries", "--format", "vap")
    assert code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ConfigMap"]
    code, _, err = run(
        capsys, "probe", "export", "policy:trusted-registries", "--format", "kyverno"
    )
    assert code == 64 and "has no params: export it as vap" in err
    code, _, _ = run(capsys, "probe", "drop", "policy-set:baseline")
    assert code == 0 and store.set_members("baseline") is None
    assert store.get("trusted-registries") is not None  # a set's policies stay
    code, _, _ = run(capsys, "probe", "drop", "policy:trusted-registries")
    assert code == 0 and store.get("trusted-registries") is None
    for sub in ("show", "export", "drop"):
        code, _, err = run(capsys, "probe", sub, "policy:trusted-registries")
        assert code == 66, (sub, err)


def test_fleet_commands_refuse_a_policy_that_is_not_imported(
    capsys: pytest.CaptureFixture[str], store: PolicyStore
) -> None:
    code, _, err = run(capsys, "batch", "policy:nothing", "--snapshots", "snapshots/*")
    assert code == 66 and "no imported policy is named 'nothing'" in err
    code, _, err = run(
        capsys,
        "schedule",
        "add",
        "nightly",
        "policy-set:nothing",
        "--every",
        "1h",
        "--snapshots",
        "snapshots/prod-eu",
    )
    assert code == 66 and "no policy set is named 'nothing'" in err
    code, _, err = run(capsys, "check", "policy:nothing", "--snapshot", "snapshots/prod-eu")
    assert code == 64 and "assay probe test policy:nothing" in err


def test_export_resolves_a_custom_kind_on_the_snapshot_given(
    capsys: pytest.CaptureFixture[str], store: PolicyStore, tmp_path: Path
) -> None:
    policy = {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "short-certificates"},
        "spec": {
            "rules": [
                {
                    "name": "at-most-90-days",
                    "match": {"any": [{"resources": {"kinds": ["Certificate"]}}]},
                    "validate": {
                        "cel": {"expressions": [{"expression": "has(object.spec.duration)"}]}
                    },
                }
            ]
        },
    }
    (tmp_path / "certificates.yaml").write_text(yaml.safe_dump(policy))
    code, _, err = run(capsys, "probe", "import", str(tmp_path / "certificates.yaml"))
    assert code == 0, err
    code, _, err = run(capsys, "probe", "export", "policy:short-certificates", "--format", "vap")
    assert code == 64 and "not a built-in kind" in err
    code, out, err = run(
        capsys, "probe", "export", "policy:short-certificates", "--snapshot", "snapshots/prod-eu"
    )
    assert code == 0, err
    rule = next(yaml.safe_load_all(out))["spec"]["matchConstraints"]["resourceRules"][0]
    assert (rule["apiGroups"], rule["apiVersions"], rule["resources"]) == (
        ["cert-manager.io"],
        ["v1"],
        ["certificates"],
    )


def test_a_policy_named_without_its_prefix_is_pointed_at(
    capsys: pytest.CaptureFixture[str], store: PolicyStore
) -> None:
    """`assay probe test run-as-non-root` reads the name as a check's: it has no probe (66), and
    the error names the imported policy (or set) the user most likely meant."""
    assert _import_examples(capsys, "--set", "baseline")[0] == 0
    for name, meant in (("run-as-non-root", "policy:run-as-non-root"),
                        ("baseline", "policy-set:baseline")):  # fmt: skip
        code, _, err = run(capsys, "probe", "test", name, "--snapshot", "snapshots/prod-eu")
        assert code == 66 and f"has this name: {meant}" in err, err
    code, _, err = run(capsys, "probe", "show", "no-such-thing")
    assert code == 66 and "has this name" not in err
