"""What a policy author or a cluster writes reaches the plain output of `assay probe import`,
`probe show policy:NAME` and `probe test policy:NAME` as text: an escape sequence (here one
that sets the terminal's title) is spelled out, never sent to the terminal, and a newline
inside a key, a name, a message or an annotation cannot forge a line of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_support import run_cli as run
from tests.kyverno_support import pod, write_objects

TITLE = "\x1b]0;pwned\x07"  # OSC 0: sets the window title
SPELLED = "\\x1b]0;pwned\\x07"
RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
]


def _policy(name: str, validations: list[dict[str, Any]], **constraints: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": name},
        "spec": {
            "validationActions": ["Audit"],
            "matchConstraints": {"resourceRules": RULES, **constraints},
            "validations": validations,
        },
    }


def _write(name: str, *documents: dict[str, Any]) -> str:
    """``name`` in the working folder, holding ``documents`` (YAML escapes: "\\e]0;pwned\\a")."""
    Path(name).write_text(yaml.safe_dump_all(documents))
    return name


def _no_raw_controls(*texts: str) -> None:
    for text in texts:
        assert "\x1b" not in text and "\x07" not in text, text


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def fleet(workdir: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    return workdir


def test_a_refusal_quoting_a_hostile_key_or_name_stays_one_line_of_text(
    capsys: pytest.CaptureFixture[str], workdir: Path
) -> None:
    odd_key = _policy(
        "odd-key",
        [{"expression": "true"}],
        **{f"boom{TITLE}\nimported policy:forged: kyverno-validatingpolicy": 1},
    )
    odd_name = _policy(f"x{TITLE}\nimported policy:forged-too: fine", [{"expression": "true"}])
    files = _write("p.yaml", odd_key, odd_name)
    code, out, err = run(capsys, "probe", "import", files, "--dry-run")
    assert code == 65, err
    _no_raw_controls(out, err)
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("refused ValidatingPolicy ") for line in lines)
    assert (
        f"refused ValidatingPolicy odd-key (p.yaml): spec.matchConstraints.boom{SPELLED}\\n"
        "imported policy:forged: kyverno-validatingpolicy: Extra inputs are not permitted"
    ) in lines
    assert lines[1].startswith(
        f"refused ValidatingPolicy x{SPELLED}\\nimported policy:forged-too: fine (p.yaml): "
    )


@pytest.mark.integration
def test_an_expression_and_a_message_are_shown_as_text(
    capsys: pytest.CaptureFixture[str], fleet: Path
) -> None:
    loud = _policy(
        "loud",
        [
            {
                "expression": f"object.metadata.name != '''{TITLE}\nrule forged:'''",
                "message": f"named{TITLE}",
            }
        ],
    )
    code, out, err = run(capsys, "probe", "import", _write("p.yaml", loud))
    assert code == 0, err
    assert out.startswith("imported policy:loud: ")
    code, out, err = run(capsys, "probe", "show", "policy:loud")
    assert code == 0, err
    _no_raw_controls(out, err)
    lines = out.splitlines()
    assert not any(line.startswith("rule forged") for line in lines)
    assert (
        f"  validation: object.metadata.name != '''{SPELLED}\\nrule forged:'''  -> named{SPELLED}"
    ) in lines


@pytest.mark.integration
def test_a_violation_quoting_an_annotation_of_the_cluster_is_shown_as_text(
    capsys: pytest.CaptureFixture[str], fleet: Path
) -> None:
    quoting = _policy(
        "quoting",
        [
            {
                "expression": "object.metadata.name != 'evil'",
                "messageExpression": "object.metadata.annotations['note']",
            }
        ],
    )
    code, _, err = run(capsys, "probe", "import", _write("p.yaml", quoting))
    assert code == 0, err
    evil = pod("evil", "shop", "registry.example.com/app:1")
    # not \r or \n (a message holding one is set aside, as the API server does), but a
    # vertical tab, a form feed, a line separator: each starts a line of its own
    evil["metadata"]["annotations"] = {"note": f"{TITLE}\x0b\x0c\u2028  Pod shop/fine: all good"}
    write_objects(fleet / "cluster", evil, pod("calm", "shop", "registry.example.com/app:1"))
    code, out, err = run(capsys, "probe", "test", "policy:quoting", "--snapshot", "cluster")
    assert code == 1, err
    _no_raw_controls(out, err)
    lines = out.splitlines()  # Python's lines: \x0b, \x0c and \u2028 end one
    assert f"  Pod shop/evil: {SPELLED}\\x0b\\x0c\\u2028  Pod shop/fine: all good" in lines
    assert not any(line.startswith("  Pod shop/fine") for line in lines)
