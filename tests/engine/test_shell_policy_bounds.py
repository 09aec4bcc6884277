"""Shell policy wildcards stay inside their lane: no paths, no '..', no URLs, no stray hosts.

The shipped example used to let ``openssl x509 ... -in http://HOST/...`` and
``openssl s_client -connect ANY:PORT`` run (requests from the worker to any
host), and ``-in /etc/shadow`` told the model whether that file exists: a
pattern's ``*`` matched ``/``, ``..`` and URLs. Now a wildcard matches within
one path segment only, file arguments go through ``{file}`` (a relative path
that resolves inside ``files_dir``), hosts through ``{host}`` (the policy's
``hosts`` list), and anything wider must be written explicitly (``{*}``,
``{**}``). Execution is detected with the real ``probe`` program of
tests/engine/test_shell_toolset.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.engine.test_shell_toolset import EXAMPLE_CONFIG, Sandbox
from workers.engine.toolsets.shell_policy import (
    ShellConfigError,
    ShellPolicy,
    argv_matches,
    load_shell_policy,
    split_pattern,
)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    box = Sandbox(tmp_path)
    monkeypatch.setenv("PATH", f"{box.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    return box


# --- the shipped example ------------------------------------------------------------------------

EXAMPLE_BYPASSES = [
    "openssl x509 -noout -subject -issuer -dates -in http://attacker.example/x.pem",
    "openssl x509 -noout -subject -issuer -dates -in https://169.254.169.254/latest",
    "openssl x509 -noout -checkend 0 -in /etc/shadow",
    "openssl x509 -noout -checkend 0 -in ../../../etc/shadow",
    "openssl x509 -noout -checkend 0 -in ..",
    "openssl x509 -noout -checkend 0 -in file:/etc/shadow",
    "openssl x509 -noout -checkend 0 -in file:shadow",
    "openssl s_client -connect attacker.example:443 -servername api.internal",
    "openssl s_client -connect 169.254.169.254:80 -servername x",
    "openssl s_client -connect api.internal:25 -servername api.internal",
    "openssl s_client -connect 10.0.0.1:6379 -servername x",
]


@pytest.mark.parametrize("command", EXAMPLE_BYPASSES)
def test_the_example_policy_refuses_each_bypass(command: str) -> None:
    policy = load_shell_policy(EXAMPLE_CONFIG)
    assert policy.refusal_for(command.split()) is not None


@pytest.mark.parametrize(
    "command",
    [
        "openssl s_client -connect api.internal:443 -servername api.internal",
        "openssl s_client -connect web.prod.svc.cluster.local:443 -servername web",
        "openssl x509 -noout -checkend 86400 -in api.pem",
        "openssl x509 -noout -subject -issuer -dates -in api.pem",
    ],
)
def test_the_example_policy_still_permits_its_own_forms(command: str) -> None:
    assert load_shell_policy(EXAMPLE_CONFIG).refusal_for(command.split()) is None


def test_a_refused_file_reveals_nothing_about_its_existence() -> None:
    policy = load_shell_policy(EXAMPLE_CONFIG)
    present = policy.refusal_for(
        ["openssl", "x509", "-noout", "-checkend", "0", "-in", "/etc/passwd"]
    )
    absent = policy.refusal_for(
        ["openssl", "x509", "-noout", "-checkend", "0", "-in", "/etc/no-such-file"]
    )
    assert present is not None and present == absent


# --- matching rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "argv", "matches"),
    [
        ("cat *", ["cat", "a.pem"], True),
        ("cat *", ["cat", "/etc/passwd"], False),
        ("cat *", ["cat", "dir/a.pem"], False),
        ("cat *", ["cat", ".."], False),
        ("cat */*", ["cat", "dir/a.pem"], True),
        ("cat */*", ["cat", "../a.pem"], False),
        ("cat */*", ["cat", "http://x"], False),
        ("cat */*/*", ["cat", "http://x"], False),
        ("cat certs/*", ["cat", "certs/a.pem"], True),
        ("cat certs/*", ["cat", "certs/.."], False),
        ("cat ../*", ["cat", "../a.pem"], True),  # a literal '..' written by the operator
        ("get *", ["get", "http://x/y"], False),
        ("get *", ["get", "http:x"], True),  # no '//': not a URL, no separator
        ("cat **", ["cat", "a", "b"], True),
        ("cat **", ["cat", "a", "/etc/passwd"], False),
        ("cat {*}", ["cat", "/etc/passwd"], True),  # explicit: any one argument
        ("cat {*}", ["cat", "--all"], False),  # still never an option
        ("cat {**}", ["cat", "-n", "/etc/passwd", "http://x"], True),
        ("x -c *:443", ["x", "-c", "a.b:443"], True),
        ("x -c *:443", ["x", "-c", "a/b:443"], False),
    ],
)
def test_wildcards_stay_within_one_path_segment(
    pattern: str, argv: list[str], matches: bool
) -> None:
    assert argv_matches(split_pattern(pattern), argv) is matches


def test_deny_patterns_keep_their_reach(tmp_path: Path) -> None:
    """A deny rule is a backstop: its wildcards match anything, so it can only refuse more."""
    policy = ShellPolicy.model_validate(
        {
            "available_commands": [{"pattern": "probe {**}", "description": "d"}],
            "allow": ["probe {**}"],
            "deny": ["** -out **", "probe *"],
            "working_dir": str(tmp_path),
        }
    )
    assert policy.refusal_for(["probe", "-in", "a", "-out", "/tmp/x"]) is not None
    assert policy.refusal_for(["probe", "/etc/passwd"]) is not None
    assert policy.refusal_for(["probe", "-in", "a", "/etc/passwd"]) is None


# --- {file} and {host}, executed ---------------------------------------------------------------


def _bounded(sandbox: Sandbox, **overrides: Any) -> dict[str, Any]:
    certs = sandbox.work / "certs"
    certs.mkdir(exist_ok=True)
    (certs / "api.pem").write_text("not really a certificate\n")
    (certs / "nested").mkdir(exist_ok=True)
    (certs / "nested" / "b.pem").write_text("x\n")
    (certs / "escape.pem").symlink_to("/etc/hostname")
    (sandbox.work / "outside.pem").write_text("outside files_dir\n")
    policy: dict[str, Any] = {
        "available_commands": [
            {"pattern": "probe -in {file}", "description": "read a certificate"},
            {"pattern": "probe -connect {host}", "description": "connect"},
        ],
        "allow": ["probe -in {file}", "probe -connect {host}"],
        "files_dir": "work/certs",
        "working_dir": "work/certs",
        "hosts": ["api.internal:443", "*.svc.cluster.local:443", "127.0.0.1:8443"],
    }
    policy.update(overrides)
    return policy


@pytest.mark.parametrize(
    "command",
    [
        "probe -in /etc/hostname",
        "probe -in ../outside.pem",
        "probe -in escape.pem",  # a symlink inside files_dir pointing out of it
        "probe -in nested/../../outside.pem",
        "probe -in http://attacker.example/a.pem",
        "probe -in file:api.pem",
        "probe -in .",
        "probe -in --help",
        "probe -connect attacker.example:443",
        "probe -connect api.internal:8443",
        "probe -connect api.internal",
        "probe -connect evil.svc.cluster.local.attacker.example:443",
        "probe -connect 127.0.0.1:6379",
        "probe -connect http://api.internal:443",
    ],
)
def test_file_and_host_placeholders_refuse_and_run_nothing(sandbox: Sandbox, command: str) -> None:
    result = sandbox.run(command, **_bounded(sandbox))
    assert not result.ok and result.output.startswith("refused:"), result.output
    assert not sandbox.probe_log.exists(), "probe ran"


@pytest.mark.parametrize(
    "command",
    [
        "probe -in api.pem",
        "probe -in nested/b.pem",
        "probe -connect api.internal:443",
        "probe -connect web.prod.svc.cluster.local:443",
        "probe -connect 127.0.0.1:8443",
    ],
)
def test_file_and_host_placeholders_let_their_own_values_run(
    sandbox: Sandbox, command: str
) -> None:
    result = sandbox.run(command, **_bounded(sandbox))
    assert result.ok, result.output
    assert sandbox.probe_log.read_text() == command.removeprefix("probe ") + "\n"


def test_the_tool_description_tells_the_model_the_rules(sandbox: Sandbox) -> None:
    (schema,) = sandbox.registry(**_bounded(sandbox)).json_schemas()
    description = schema["function"]["description"]
    assert "{file}" in description and "{host}" in description
    assert "api.internal:443" in description


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"available_commands": [{"pattern": "probe {path}", "description": "d"}]}, "{path}"),
        ({"allow": ["probe {host}"], "hosts": []}, "hosts"),
        ({"hosts": ["attacker.example"]}, "HOST:PORT"),
        ({"hosts": ["*:443"]}, "HOST:PORT"),
        ({"hosts": ["a.example:99999"]}, "HOST:PORT"),
        ({"deny": ["probe {file}"]}, "deny"),
        ({"files_dir": "no-such-folder"}, "files_dir"),
    ],
)
def test_placeholder_mistakes_are_config_errors(
    sandbox: Sandbox, overrides: dict[str, Any], complaint: str
) -> None:
    path = sandbox.config(**_bounded(sandbox, **overrides))
    with pytest.raises(ShellConfigError, match=complaint.replace("{", r"\{").replace("}", r"\}")):
        load_shell_policy(path)
