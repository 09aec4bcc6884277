"""A string holding a NUL character never reaches CEL cut short.

The CEL runtime's bindings hand strings to C++ cut at their first NUL, so a hostile object's
``"ok\\u0000evil"`` would be judged as ``"ok"``: ``!contains('evil')`` would hold and a
failing object would pass. An object, params or a library's answer holding one gets no
verdict, naming what held it; an object whose text only spells the escape is judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schemas.verdict import VerdictKind
from tests.kyverno_support import config_map, policy_text, snapshot_of
from workers.policy_engine.cel.lib.base import holds_nul
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies

NO_EVIL = policy_text(
    "no-evil",
    "configmaps",
    """  validations:
    - expression: "!object.data.exists(k, k.contains('evil') || object.data[k].contains('evil'))"
      message: no evil
""",
    kind="ValidatingAdmissionPolicy",
)

UNMARSHALLED = policy_text(
    "plain-mode",
    "configmaps",
    """  validations:
    - expression: "json.unmarshal(object.data.settings).mode == 'safe'"
      message: mode is safe
""",
)


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return config_map(name, "shop", data)


def _run(folder: Path, policy: str, *objects: dict[str, Any]) -> Any:
    # JSON writes the NUL as \u0000, as the API server's JSON holds it
    backend = snapshot_of(folder, *objects)
    policies, refusals = import_documents(documents_from_text(policy, "p.yaml"))
    assert refusals == []
    (result,), _ = run_policies(policies, backend)
    return result


@pytest.mark.parametrize(
    "data",
    [{"motd": "ok\u0000evil"}, {"motd\u0000evil": "ok"}],
    ids=["in-a-value", "in-a-key"],
)
def test_an_object_holding_a_nul_gets_no_verdict_not_a_pass(
    tmp_path: Path, data: dict[str, str]
) -> None:
    result = _run(
        tmp_path / "c", NO_EVIL, _config_map("fine", {"motd": "ok"}), _config_map("odd", data)
    )
    assert result.verdict == VerdictKind.CANNOT_DETERMINE, result
    assert "ConfigMap shop/odd holds a string with a NUL character" in (result.reason or "")


def test_text_spelling_the_escape_is_judged_as_written(tmp_path: Path) -> None:
    """A backslash followed by u0000 is six characters, not a NUL: judged, and it fails."""
    result = _run(tmp_path / "c", NO_EVIL, _config_map("odd", {"motd": "\\u0000evil"}))
    assert result.verdict == VerdictKind.FALSE, result
    assert [v.name for v in result.violations] == ["odd"]


def test_a_library_answer_holding_a_nul_gets_no_verdict(tmp_path: Path) -> None:
    """The object holds no NUL, only JSON text with the escape; json.unmarshal's answer
    does, and the runtime would read it as 'safe'."""
    sneaky = _config_map("sneaky", {"settings": json.dumps({"mode": "safe\u0000off"})})
    honest = _config_map("honest", {"settings": json.dumps({"mode": "safe"})})
    assert not holds_nul(sneaky)
    result = _run(tmp_path / "c", UNMARSHALLED, honest, sneaky)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE, result
    assert "NUL character" in (result.reason or ""), result.reason


def test_params_holding_a_nul_are_refused(tmp_path: Path) -> None:
    from schemas.probe import ProposedProbe
    from workers.policy_engine.cel.programs import CelError
    from workers.policy_engine.probes.program import ProbeProgram

    probe = ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "ConfigMap"}}],
            "expression": "object.data.motd != params.banned",
            "params": {"banned": "evil\u0000"},
        }
    )
    with pytest.raises(CelError, match="its params hold a string with a NUL character"):
        ProbeProgram(probe)


@pytest.mark.parametrize(
    ("value", "held"),
    [
        ({"a": ["x", {"b": "y\u0000"}]}, True),
        ({"a\u0000": 1}, True),
        ([b"x\x00"], True),
        ({"a": "\\u0000"}, False),
        ({"a": ["x", 1, 2.5, None, True]}, False),
    ],
)
def test_holds_nul_looks_at_every_string_key_and_bytes(value: Any, held: bool) -> None:
    assert holds_nul(value) is held
