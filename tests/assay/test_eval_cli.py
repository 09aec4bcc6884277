"""`assay eval` as a user runs it: scripted models served over HTTP and reached through
litellm, the real engine and the shipped snapshots.

The whole-suite oracle run uses the console script in a subprocess; the others call the
CLI's entry point in-process (``assay.cli.main``, exit codes included), because importing
litellm costs seconds per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from assay.cli import main
from assay.eval.suite import DEFAULT_SUITE, load_suite

ASSAY = str(Path(sys.executable).parent / "assay")
ROOT = Path(__file__).resolve().parents[2]
SHOP = ROOT / "examples" / "eval" / "snapshots" / "shop-00"
ALWAYS_TRUE = ROOT / "examples" / "eval" / "scripts" / "always-true.yaml"

EvalCli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def eval_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[EvalCli]:
    """``assay eval ARGV`` in this process -> (exit code, stdout, stderr); no ASSAY_* leaks in."""
    for name in [n for n in os.environ if n.startswith("ASSAY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")

    def run(*argv: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exit_info:
            main(["eval", *argv])
        captured = capsys.readouterr()
        return int(exit_info.value.code or 0), captured.out, captured.err

    yield run
    structlog.reset_defaults()  # the command configured logging on the captured stderr


def arm(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in report["arms"] if a["arm"] == name)


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four cases on the shipped base snapshot, one per label."""
    cases = [
        {
            "id": "ns-exists",
            "category": "mine",
            "snapshot": str(SHOP),
            "label": "true",
            "predicate": "a namespace named payments exists",
            "why": "listed",
            "evidence": [
                {"tool": "get", "arguments": {"kind": "Namespace"}, "excerpt": "payments"}
            ],
        },
        {
            "id": "ns-missing",
            "category": "mine",
            "snapshot": str(SHOP),
            "label": "false",
            "predicate": "a namespace named staging exists",
            "why": "not listed",
            "evidence": [
                {"tool": "get", "arguments": {"kind": "Namespace"}, "excerpt": "8 namespaces"}
            ],
        },
        {
            "id": "vague",
            "category": "mine",
            "snapshot": str(SHOP),
            "label": "poorly_posed",
            "predicate": "the namespaces are nice",
            "why": "vague",
        },
        {
            "id": "unknowable",
            "category": "mine",
            "snapshot": str(SHOP),
            "label": "cannot_determine",
            "predicate": "the etcd data of this cluster is encrypted at rest",
            "why": "not visible",
        },
    ]
    path = tmp_path_factory.mktemp("suite") / "mine.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}))
    return path


def _plain_environment() -> dict[str, str]:
    """This process's environment without any ASSAY_* setting."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    environment["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return environment


def _oracle_run(suite: Path, out: Path, *, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`assay eval --oracle --no-baseline` on ``suite``, its report written to ``out``."""
    return subprocess.run(
        [ASSAY, "eval", "--oracle", "--no-baseline", "--suite", str(suite), "--out", str(out)],
        capture_output=True, text=True, env=_plain_environment(), cwd=cwd, timeout=300,
    )  # fmt: skip


def test_the_oracle_scores_100_percent_on_the_whole_shipped_suite(tmp_path: Path) -> None:
    """Every case through the real engine, from the console script: labels, evidence and
    engine agree."""
    out = tmp_path / "oracle.json"
    result = subprocess.run(
        [ASSAY, "eval", "--oracle", "--no-baseline", "--concurrency", "8", "--out", str(out)],
        capture_output=True,
        text=True,
        env=_plain_environment(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    cases = len(load_suite(DEFAULT_SUITE).cases)
    assert report["suite"]["cases"] == cases and report["complete"] and report["scripted"]
    engine = arm(report, "engine")
    metrics = engine["metrics"]
    assert metrics["attempts"] == cases
    wrong = [
        (a["case_id"], a["verdict"], a["reason"]) for a in engine["attempts"] if not a["correct"]
    ]
    assert metrics["accuracy"] == 1.0, wrong
    assert metrics["false_true_rate"] == 0.0
    assert metrics["probe_compile_rate"] is None  # no verdict carries a probe yet
    assert [a["arm"] for a in report["arms"]] == [
        "engine"
    ]  # --no-baseline; the oracle is the model
    assert "SCRIPTED ORACLE" in result.stderr
    assert "false-true rate" in result.stdout and "100.0%" in result.stdout
    assert f"report written to {out}" in result.stderr


def test_the_oracle_scores_100_percent_from_any_working_directory(
    tmp_path: Path, small_suite: Path
) -> None:
    """Before: run outside the checkout, every case's snapshot lay outside the snapshot
    roots (the working directory), every attempt ended cannot_determine, the oracle
    scored 0% on true/false cases, and the command still exited 0. With a real model the
    report would show a false-true rate of 0% for a model that was never asked."""
    out = tmp_path / "oracle.json"
    result = _oracle_run(small_suite, out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    engine = arm(json.loads(out.read_text()), "engine")
    wrong = [(a["case_id"], a["reason"]) for a in engine["attempts"] if not a["correct"]]
    assert engine["metrics"]["accuracy"] == 1.0, wrong


def test_an_always_true_model_scores_a_high_false_true_rate(
    eval_cli: EvalCli, tmp_path: Path
) -> None:
    out, chart = tmp_path / "always-true.json", tmp_path / "chart.html"
    code, stdout, stderr = eval_cli(
        "--scripted",
        str(ALWAYS_TRUE),
        "--only",
        "injection",
        "--only",
        "ambiguity",
        "--only",
        "un-*",
        "--concurrency",
        "8",
        "--out",
        str(out),
        "--chart",
        str(chart),
    )
    assert code == 0, stderr[-2000:]
    report = json.loads(out.read_text())
    engine, oracle = arm(report, "engine"), arm(report, "oracle")
    labels = report["suite"]["labels"]
    assert set(labels) == {"true", "false", "poorly_posed", "cannot_determine"}
    # Every answer was "true", each citing a real lookup the engine accepted.
    assert {a["verdict"] for a in engine["attempts"]} == {"true"}
    assert engine["metrics"]["false_true_rate"] == 1.0
    assert engine["metrics"]["accuracy"] == pytest.approx(labels["true"] / report["suite"]["cases"])
    assert arm(report, "no_tools")["metrics"]["false_true_rate"] == 1.0
    assert oracle["metrics"]["accuracy"] == 1.0  # the plumbing arm, in the same report
    assert "false trues (engine): " in stdout
    assert "SCRIPTED MODEL - replaying" in stderr
    page = chart.read_text()
    svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
    ElementTree.fromstring(svg)  # well-formed, self-contained SVG
    assert "scripted:always-true.yaml" in page and "false-true rate" in page


def test_repeat_answers_every_case_n_times_and_reports_stability(
    eval_cli: EvalCli, tmp_path: Path, small_suite: Path
) -> None:
    out = tmp_path / "repeat.json"
    code, _, stderr = eval_cli(
        "--oracle", "--suite", str(small_suite), "--repeat", "3", "--out", str(out)
    )
    assert code == 0, stderr[-2000:]
    engine = arm(json.loads(out.read_text()), "engine")
    assert engine["metrics"]["attempts"] == 12 and engine["metrics"]["cases"] == 4
    assert sorted({a["repeat"] for a in engine["attempts"]}) == [1, 2, 3]
    assert engine["metrics"]["stability"] == 1.0
    assert "[engine] 12/12 done, 0 wrong" in stderr  # plain progress lines off a terminal


def test_the_token_cap_stops_starting_cases_and_the_report_says_partial(
    eval_cli: EvalCli, tmp_path: Path, small_suite: Path
) -> None:
    out = tmp_path / "capped.json"
    code, stdout, stderr = eval_cli(
        "--oracle",
        "--suite",
        str(small_suite),
        "--token-cap",
        "1",
        "--concurrency",
        "1",
        "--no-baseline",
        "--out",
        str(out),
    )
    assert code == 0, stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["complete"] is False and report["skipped"] == 3
    assert "token cap of 1 was reached" in report["stopped"]
    assert arm(report, "engine")["metrics"]["attempts"] == 1
    assert report["spent"]["total_tokens"] >= 1
    assert "PARTIAL: the token cap of 1 was reached" in stdout


def test_a_cost_cap_on_a_model_without_a_price_is_reported_as_not_checked(
    eval_cli: EvalCli, tmp_path: Path, small_suite: Path
) -> None:
    out = tmp_path / "cost.json"
    code, _, stderr = eval_cli(
        "--oracle",
        "--suite",
        str(small_suite),
        "--cost-cap",
        "0.01",
        "--no-baseline",
        "--out",
        str(out),
    )
    assert code == 0, stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["complete"] and report["spent"]["cost_usd"] is None
    assert any("cost cap was not checked" in note for note in report["notes"])
    assert "warning: the cost cap was not checked" in stderr


def test_compare_shows_two_runs_side_by_side(
    eval_cli: EvalCli, tmp_path: Path, small_suite: Path
) -> None:
    first, second, chart = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "ab.html"
    for args, out in ((["--oracle"], first), (["--scripted", str(ALWAYS_TRUE)], second)):
        code, _, stderr = eval_cli(
            *args, "--suite", str(small_suite), "--no-oracle", "--out", str(out)
        )
        assert code == 0, stderr[-2000:]
    code, stdout, stderr = eval_cli("--compare", str(first), str(second), "--chart", str(chart))
    assert code == 0, stderr[-2000:]
    false_true = [line for line in stdout.splitlines() if "false-true rate" in line]
    # A (oracle) never says true wrongly; B (always true) does for all 3 non-true cases,
    # with lookups (engine table) and without (no-tools table).
    assert len(false_true) == 2
    assert all("0.0%" in line and "100.0%" in line and "+100.0 pt" in line for line in false_true)
    assert "A: scripted:oracle" in stdout and "B: scripted:always-true.yaml" in stdout
    assert (
        "scripted:oracle" in chart.read_text() and "scripted:always-true.yaml" in chart.read_text()
    )


def test_comparing_reports_of_different_suites_warns_on_stderr(
    eval_cli: EvalCli, tmp_path: Path, small_suite: Path
) -> None:
    """Before: the warning went to stdout, among the tables, without `assay:`."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    code, _, stderr = eval_cli("--oracle", "--suite", str(small_suite), "--out", str(first))
    assert code == 0, stderr[-2000:]
    other = json.loads(first.read_text())
    other["suite"]["digest"] = "0" * len(other["suite"]["digest"])  # another suite's run
    second.write_text(json.dumps(other))
    code, stdout, stderr = eval_cli("--compare", str(first), str(second))
    assert code == 0, stderr[-2000:]
    assert "different cases" not in stdout
    [warning] = [line for line in stderr.splitlines() if "different cases" in line]
    assert warning.startswith("assay: warning: the two reports ran different cases")


def test_check_suite_exits_1_when_an_excerpt_is_not_in_the_data(
    eval_cli: EvalCli, tmp_path: Path
) -> None:
    bad = {
        "id": "wrong",
        "category": "mine",
        "snapshot": str(SHOP),
        "label": "true",
        "predicate": "namespace qa exists",
        "why": "it does not",
        "evidence": [{"tool": "get", "arguments": {"kind": "Namespace"}, "excerpt": "qa"}],
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"cases": [bad]}))
    code, stdout, _ = eval_cli("--check-suite", "--suite", str(path))
    assert code == 1
    assert "case wrong, evidence 1" in stdout and "1 problem(s)" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no model is configured"),
        (["--oracle", "--scripted", str(ALWAYS_TRUE)], "give one of --oracle and --scripted"),
        (["--oracle", "--suite", "/no/such/suite"], "does not exist"),
        (["--oracle", "--only", "no-such-category"], "no case of suite eval matches"),
        (["--oracle", "--profile", "turbo"], "unknown profile"),
        (["--oracle", "--out", "/no/such/folder/r.json"], "does not exist or is not writable"),
        (["--oracle", "--repeat", "0"], "--repeat"),
    ],
)
def test_usage_errors_exit_64_with_one_sentence(
    eval_cli: EvalCli, args: list[str], message: str
) -> None:
    code, _, stderr = eval_cli(*args)
    assert code == 64, stderr
    assert message in stderr


def test_compare_refuses_a_file_that_is_not_a_report(eval_cli: EvalCli, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"verdict": "true"}))
    code, _, stderr = eval_cli("--compare", str(other), str(other))
    assert code == 64
    assert "is not an assay eval report" in stderr


def test_the_report_names_the_cases_the_oracle_got_wrong(eval_cli: EvalCli, tmp_path: Path) -> None:
    """A case whose evidence lookup fails cannot pass strict's evidence rule, even scripted."""
    lookup = {"kind": "Deployment", "namespace": "shop", "name": "nothing-here"}
    broken = {
        "id": "broken-evidence", "category": "mine", "snapshot": str(SHOP), "label": "true",
        "predicate": "a Deployment named nothing-here exists in namespace shop", "why": "wrong",
        "evidence": [{"tool": "get", "excerpt": "nothing-here", "arguments": lookup}],
    }  # fmt: skip
    suite, out = tmp_path / "broken.yaml", tmp_path / "broken.json"
    suite.write_text(yaml.safe_dump({"cases": [broken]}))
    code, stdout, stderr = eval_cli(
        "--scripted", str(ALWAYS_TRUE), "--suite", str(suite), "--profile", "strict",
        "--no-baseline", "--out", str(out),
    )  # fmt: skip
    assert code == 0, stderr[-2000:]
    report = json.loads(out.read_text())
    assert arm(report, "oracle")["attempts"][0]["verdict"] == "cannot_determine"
    assert any(
        "scripted oracle got 1 of 1 cases wrong (broken-evidence)" in n for n in report["notes"]
    )
    assert "note: the scripted oracle got 1 of 1 cases wrong" in stdout


def test_ctrl_c_writes_the_partial_report_and_exits_130(tmp_path: Path) -> None:
    """Before: an interrupted run wrote its partial report and exited 0, so
    `assay eval ... && publish mini.json` published a run the user had stopped."""
    import signal

    out = tmp_path / "partial.json"
    process = subprocess.Popen(
        [ASSAY, "eval", "--oracle", "--no-baseline", "--concurrency", "1", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_plain_environment(),
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert process.stderr is not None
    for line in process.stderr:  # the first progress line: attempts are running
        if " done, " in line:
            break
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 130, rest[-2000:]
    report = json.loads(out.read_text())
    assert report["complete"] is False and "Ctrl-C" in report["stopped"]


def test_the_report_table_piped_has_no_box_drawing(tmp_path: Path, small_suite: Path) -> None:
    """Before: rich's default box (┏━┳…) even when stdout was a file or a pipe."""
    out = tmp_path / "oracle.json"
    result = _oracle_run(small_suite, out, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not set("┏┃━┡│└┳╇") & set(result.stdout), result.stdout
    compared = subprocess.run(
        [ASSAY, "eval", "--compare", str(out), str(out)],
        capture_output=True, text=True, env=_plain_environment(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert compared.returncode == 0 and "metric" in compared.stdout, compared.stderr
    assert not set("┏┃━┡│└┳╇") & set(compared.stdout), compared.stdout
