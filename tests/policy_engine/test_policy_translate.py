"""`assay policy translate`: a policy of one engine in, a ValidatingAdmissionPolicy (or a
Kyverno ValidatingPolicy) out, written only when the original and the translation judge
every object given alike; exit 0 proven, 1 an object disagrees, 64 usage or a refusal."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.cli_support import run_cli as run
from tests.translation_support import NULL_SENSITIVE
from tests.translation_support import deployment as _deployment

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "cel_corpus"
EXAMPLES = ROOT / "examples"


def _files(tmp_path: Path, *objects: dict[str, object]) -> list[str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(NULL_SENSITIVE)
    found = tmp_path / "objects.yaml"
    found.write_text(yaml.safe_dump_all(list(objects)))
    return [str(policy), str(found)]


def test_a_gatekeeper_suite_translates_to_a_proven_vap(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_file = tmp_path / "vap.yaml"
    suite = CORPUS / "gatekeeper-host-network"
    code, out, err = run(capsys, "policy", "translate", str(suite), "-o", str(out_file))
    assert code == 0, err
    assert out == ""
    assert "6 of 6 objects judged alike" in err
    documents = list(yaml.safe_load_all(out_file.read_text()))
    assert [d["kind"] for d in documents[:2]] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    for document in documents[:2]:
        kubernetes_validate.validate(document, "1.33.0", strict=True)


def test_a_kyverno_policy_is_proven_on_a_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "policy", "translate", str(EXAMPLES / "policies" / "kyverno-run-as-non-root.yaml"),
        "--against", str(EXAMPLES / "snapshots" / "prod-eu"),
    )  # fmt: skip
    assert code == 0, err
    assert "24 of 24 objects judged alike" in err
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds.count("ValidatingAdmissionPolicy") == 3  # pods, and Kyverno's two autogen


def test_a_disagreement_writes_nothing_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = _files(tmp_path, _deployment("set", 2), _deployment("nulled", None))
    out_file = tmp_path / "kyverno.yaml"
    code, out, err = run(capsys, "policy", "translate", *files, "--to", "kyverno",
                         "-o", str(out_file))  # fmt: skip
    assert code == 1
    assert out == "" and not out_file.exists()
    assert "1 of 2 objects judged alike" in err
    assert "disagrees: Deployment prod/nulled: original denied, translation allowed" in err
    assert "not written" in err
    # asked for, it is written, and the exit code still says it is not proven
    code, _, err = run(capsys, "policy", "translate", *files, "--to", "kyverno",
                       "-o", str(out_file), "--force")  # fmt: skip
    assert code == 1 and out_file.exists()
    # as a VAP the same objects agree
    code, out, err = run(capsys, "policy", "translate", *files, "--to", "vap")
    assert code == 0 and "2 of 2 objects judged alike" in err


def test_an_object_neither_can_judge_is_not_proof(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    paused = _deployment("paused", 2)
    paused["spec"]["paused"] = False  # type: ignore[index]
    files = _files(tmp_path, _deployment("unset", 2), paused)
    policy = Path(files[0])
    policy.write_text(NULL_SENSITIVE.replace("has(object.spec.replicas)",
                                             "object.spec.paused == false"))  # fmt: skip
    code, out, err = run(capsys, "policy", "translate", *files)
    assert code == 1 and out == ""
    # judged together, then each alone: the one that can be judged is, and agrees
    assert "1 of 2 objects judged alike" in err
    assert "Deployment prod/unset: original undetermined, translation undetermined" in err
    assert "prod/paused" not in err


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--to", "rego"], "use vap or kyverno"),
        (["--against", "a", "--context", "b"], "at most one of --against"),
        (["--action", "Block"], "use Audit, Warn or Deny"),
    ],
)
def test_usage_errors_exit_64(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], reason: str
) -> None:
    files = _files(tmp_path, _deployment("set", 2))
    code, out, err = run(capsys, "policy", "translate", *files, *args)
    assert code == 64 and out == ""
    assert reason in err


def test_refusals_exit_64_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = _files(tmp_path, _deployment("set", 2))
    policy = Path(files[0])
    policy.write_text(NULL_SENSITIVE.replace("has(object.spec.replicas)",
                                             "request.userInfo.username != ''"))  # fmt: skip
    code, out, err = run(capsys, "policy", "translate", *files)
    assert code == 64 and out == ""
    assert "reads request.userInfo" in err and "cannot be translated" in err
    # a translation that has no form in the target format: the policy and the field named
    gatekeeper = str(EXAMPLES / "policies" / "gatekeeper-required-labels.yaml")
    snapshot = str(EXAMPLES / "snapshots" / "prod-eu")
    code, out, err = run(capsys, "policy", "translate", gatekeeper, "--against", snapshot,
                         "--to", "kyverno")  # fmt: skip
    assert code == 64 and out == ""
    assert "policy:prod-workloads-labelled" in err and "spec.paramKind" not in err
    assert "a Kyverno ValidatingPolicy has no params" in err
    # nothing to prove it on
    policy.write_text(NULL_SENSITIVE)
    code, out, err = run(capsys, "policy", "translate", files[0])
    assert code == 64 and "nothing to prove it on" in err


def test_a_translation_is_proven_on_a_live_cluster_read_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from assay.testing.fake_apiserver import FakeApiServer
    from assay.testing.fake_cluster import FakeCluster

    cluster = FakeCluster.from_snapshot(EXAMPLES / "snapshots" / "prod-eu", name="eu")
    with FakeApiServer([cluster]) as server:
        monkeypatch.setenv("ASSAY_KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kc")))
        policy = str(EXAMPLES / "policies" / "kyverno-run-as-non-root.yaml")
        code, out, err = run(capsys, "policy", "translate", policy, "--context", "eu")
        assert code == 0, err
        assert "24 of 24 objects judged alike" in err  # as on the snapshot it was taken from
        assert server.methods() == {"GET"}
    assert [d["kind"] for d in yaml.safe_load_all(out)].count("ValidatingAdmissionPolicy") == 3


def test_an_object_name_is_named_on_one_line_of_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A disagreeing object is named on stderr as text: the escape sequence in its name
    (setting the terminal's title) is spelled out, its newline cannot forge a line."""
    hostile = "nulled\x1b]0;pwned\x07\n  disagrees: none"
    files = _files(tmp_path, _deployment("set", 2), _deployment(hostile, None))
    code, out, err = run(capsys, "policy", "translate", *files, "--to", "kyverno")
    assert code == 1 and out == ""
    assert "\x1b" not in err and "\x07" not in err
    disagreeing = [line for line in err.splitlines() if line.startswith("  disagrees: ")]
    assert disagreeing == [
        "  disagrees: Deployment prod/nulled\\x1b]0;pwned\\x07\\n  disagrees: none: original "
        "denied, translation allowed"
    ]


def test_a_refusal_quoting_a_hostile_key_is_one_line_of_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = _files(tmp_path, _deployment("set", 2))
    policy = Path(files[0])
    key = '"boom\\e]0;pwned\\a\\nassay: error: none"'
    policy.write_text(NULL_SENSITIVE.replace("  failurePolicy: Fail", f"  {key}: 1"))
    code, out, err = run(capsys, "policy", "translate", *files)
    assert code == 64 and out == ""
    assert "\x1b" not in err and "\x07" not in err
    assert err.splitlines() == [
        "assay: error: some documents cannot be translated: ValidatingAdmissionPolicy "
        "replicas-set: spec.boom\\x1b]0;pwned\\x07\\nassay: error: none: Extra inputs are not "
        "permitted"
    ]
