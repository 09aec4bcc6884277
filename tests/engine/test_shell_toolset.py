"""The opt-in shell toolset, exercised with real processes.

Execution is detected, not assumed: ``probe`` is a real executable on PATH that
appends its arguments to a log file (and, like many real tools, writes the
file named by ``--output=FILE``). An attempt that was refused must leave both
the probe log and its marker file absent.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.settings import load_settings
from workers.engine.toolsets.base import ToolRegistry, ToolResult
from workers.engine.toolsets.shell import RunCommandTool, shell_tools
from workers.engine.toolsets.shell_policy import (
    ShellConfigError,
    ShellPolicy,
    argv_matches,
    load_shell_policy,
    split_pattern,
)

EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "shell.yaml"

PROBE_SCRIPT = """#!/bin/sh
printf '%s\\n' "$*" >> "{log}"
for arg in "$@"; do
  case "$arg" in --output=*) : > "${{arg#--output=}}" ;; esac
done
echo "probe ran: $*"
"""


class Sandbox:
    """A private bin dir holding ``probe``, a working dir, and helpers to build the tool."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.work = root / "work"
        self.probe_log = root / "probe.log"
        self.marker = root / "marker"
        self.bin.mkdir()
        self.work.mkdir()
        probe = self.bin / "probe"
        probe.write_text(PROBE_SCRIPT.format(log=self.probe_log))
        probe.chmod(probe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def config(self, **overrides: Any) -> Path:
        policy: dict[str, Any] = {
            "available_commands": [
                {"pattern": "probe **", "description": "records its arguments"},
                {"pattern": "env", "description": "print the environment"},
                {"pattern": "pwd", "description": "print the working directory"},
                {"pattern": "seq *", "description": "count"},
                {"pattern": "sleep *", "description": "wait"},
                {"pattern": "ls *", "description": "list a path"},
                {"pattern": "sh *.sh", "description": "run a script in the working dir"},
            ],
            "allow": ["probe **", "env", "pwd", "seq *", "sleep *", "ls *", "sh *"],
            "deny": ["** --o* **", "** -o* **"],
            "timeout_seconds": 5,
            "output_limit_bytes": 4096,
            "working_dir": str(self.work),
        }
        policy.update(overrides)
        path = self.root / "shell.yaml"
        path.write_text(yaml.safe_dump(policy))
        return path

    def registry(self, **overrides: Any) -> ToolRegistry:
        settings = load_settings(shell_config=self.config(**overrides))
        return ToolRegistry(shell_tools(settings))

    def run(self, command: str, **overrides: Any) -> ToolResult:
        return self.registry(**overrides).call("run_command", {"command": command})


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    box = Sandbox(tmp_path)
    monkeypatch.setenv("PATH", f"{box.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    return box


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may linger as a zombie until reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] not in ("Z", "X")


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.02)
    return not _running(pid)


# --- on / off ----------------------------------------------------------------------------


def test_disabled_when_not_configured() -> None:
    assert shell_tools(load_settings()) == []


def test_configured_tool_shows_the_catalogue_to_the_model(sandbox: Sandbox) -> None:
    (schema,) = sandbox.registry().json_schemas()
    function = schema["function"]
    assert function["name"] == "run_command"
    assert "`probe **`: records its arguments" in function["description"]
    assert "stopped after 5 s" in function["description"]
    assert set(function["parameters"]["properties"]) == {"command"}
    assert function["parameters"]["additionalProperties"] is False


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ShellConfigError, match="ASSAY_SHELL_CONFIG"):
        shell_tools(load_settings(shell_config=tmp_path / "absent.yaml"))


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"available_commands": []}, "available_commands"),
        ({"allow": []}, "allow"),
        ({"available_commands": [{"pattern": "* x", "description": "d"}]}, "literal program"),
        ({"available_commands": [{"pattern": "** x", "description": "d"}]}, "literal program"),
        ({"env_allow": ["PATH", "ASSAY_API_KEY"]}, "looks like a credential"),
        ({"env_allow": ["AWS_SECRET_ACCESS_KEY"]}, "looks like a credential"),
        ({"env_allow": ["GITHUB_TOKEN"]}, "looks like a credential"),
        ({"env_allow": ["PATH=x"]}, "not an environment variable name"),
        ({"deny": ["probe 'unbalanced"]}, "cannot be split"),
        ({"working_dir": "does-not-exist"}, "not a directory"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_config_is_refused_when_loaded(
    sandbox: Sandbox, overrides: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ShellConfigError, match=complaint):
        load_shell_policy(sandbox.config(**overrides))


def test_relative_working_dir_is_taken_from_the_config_folder(sandbox: Sandbox) -> None:
    result = sandbox.run("pwd", working_dir="work")
    assert result.ok
    assert str(sandbox.work) in result.output


# --- pattern matching and precedence -------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "argv", "matches"),
    [
        ("date", ["date"], True),
        ("date", ["date", "-u"], False),
        ("date **", ["date"], True),
        ("date **", ["date", "-u", "+%s"], True),
        ("helm status *", ["helm", "status", "web"], True),
        ("helm status *", ["helm", "status", "web", "extra"], False),
        ("helm status *", ["helm", "status", "--kubeconfig=/x"], False),
        ("helm status * -n *", ["helm", "status", "web", "-n", "prod"], True),
        ("helm status * -n *", ["helm", "status", "web", "-n", "-A"], False),
        ("openssl s_client -connect *:443", ["openssl", "s_client", "-connect", "a.b:443"], True),
        ("openssl s_client -connect *:443", ["openssl", "s_client", "-connect", "a.b:8443"], False),
        ("** -out **", ["openssl", "x509", "-out", "f"], True),
        ("** -out **", ["openssl", "x509", "-noout"], False),
        ("** -o* **", ["sort", "-ofile"], True),
        ("x ** y", ["x", "y"], True),
        ("x ** y", ["x", "a", "b", "y"], True),
        ("x ** y", ["x", "a", "b"], False),
        ("Date", ["date"], False),
    ],
)
def test_pattern_matching(pattern: str, argv: list[str], matches: bool) -> None:
    assert argv_matches(split_pattern(pattern), argv) is matches


PRECEDENCE_POLICY = ShellPolicy.model_validate(
    {
        "available_commands": [
            {"pattern": "probe a *", "description": "one argument after a"},
            {"pattern": "probe b **", "description": "anything after b"},
            {"pattern": "probe c", "description": "just c"},
        ],
        "allow": ["probe a **", "probe c"],
        "deny": ["probe a secret*"],
    }
)


@pytest.mark.parametrize(
    ("command", "refusal"),
    [
        ("probe a x", None),  # allowed and available
        ("probe c", None),
        ("probe a secret1", "deny rule"),  # deny wins although allowed and available
        ("probe b x", "allow list"),  # available but not allowed
        ("probe a x y", "available commands"),  # allowed ("probe a **") but not available
        ("probe a --flag", "available commands"),  # a value wildcard never takes an option
        ("probe d", "allow list"),  # neither
    ],
)
def test_deny_then_allow_then_available_commands(command: str, refusal: str | None) -> None:
    reason = PRECEDENCE_POLICY.refusal_for(command.split())
    if refusal is None:
        assert reason is None
    else:
        assert reason is not None and refusal in reason


def test_precedence_decides_what_actually_runs(sandbox: Sandbox) -> None:
    policy = {
        "available_commands": [
            {"pattern": "probe a *", "description": "d"},
            {"pattern": "probe b **", "description": "d"},
        ],
        "allow": ["probe a **"],
        "deny": ["probe a secret*"],
    }
    refused = [
        sandbox.run(cmd, **policy) for cmd in ("probe a secret1", "probe b x", "probe a x y")
    ]
    assert all(not r.ok and r.meta.get("refused") for r in refused)
    assert not sandbox.probe_log.exists()
    ran = sandbox.run("probe a x", **policy)
    assert ran.ok and "exit code: 0" in ran.output
    assert sandbox.probe_log.read_text() == "a x\n"


# --- injection attempts: all refused, none executed ------------------------------------------

# (id, command template with {m} for the marker path, does `sh -c` create the marker?)
INJECTIONS: list[tuple[str, str, bool]] = [
    ("semicolon", "probe x; touch {m}", True),
    ("semicolon-no-space", "probe x;touch {m}", True),
    ("and", "probe x && touch {m}", True),
    ("or", "probe x || touch {m}", False),
    ("background", "probe x & touch {m}", True),
    ("pipe", "probe x | touch {m}", True),
    ("backtick", "probe `touch {m}`", True),
    ("dollar-paren", "probe $(touch {m})", True),
    ("redirect-out", "probe x > {m}", True),
    ("redirect-append", "probe x >> {m}", True),
    ("redirect-in", "probe x < {m}", False),
    ("newline", "probe x\ntouch {m}", True),
    ("carriage-return", "probe x\rtouch {m}", False),
    ("quoted-semicolon", "probe 'x';touch {m}", True),
    ("double-quoted-then-semicolon", 'probe "x";touch {m}', True),
    ("semicolon-inside-quotes", "probe 'x; touch {m}'", False),
    ("double-quoted-substitution", 'probe "$(touch {m})"', True),
    ("single-quoted-substitution", "probe '$(touch {m})'", False),
    ("ifs-separators", "probe x${{IFS}}&&${{IFS}}touch${{IFS}}{m}", True),
    ("ifs-substitution", "probe$IFS$(touch$IFS{m})", True),
    ("env-expansion", "probe $HOME", False),
    ("brace-env-expansion", "probe ${{PATH}}", False),
    ("backslash-escape", "probe x\\;touch {m}", False),
    ("subshell", "(touch {m})", True),
    ("glob-star", "probe {m}*", False),
    ("glob-question", "probe ?", False),
    ("glob-class", "probe [a-z]", False),
    ("brace-expansion", "probe {{a,b}}", False),
    ("tilde", "probe ~", False),
    ("history-bang", "probe !!", False),
    ("comment", "probe x #", False),
    ("nul-byte", "probe x\x00touch {m}", False),
    ("tab", "probe x\ttouch", False),
    ("escape-sequence", "probe x\x1b[2J", False),
    ("delete-char", "probe x\x7f", False),
    ("fullwidth-semicolon", "probe x\uff1b touch {m}", False),
    ("greek-question-mark", "probe x\u037e touch {m}", False),
    ("fullwidth-pipe", "probe x \uff5c touch {m}", False),
    ("fullwidth-ampersands", "probe x \uff06\uff06 touch {m}", False),
    ("fullwidth-dollar", "probe \uff04(touch {m})", False),
    ("fullwidth-greater-than", "probe x \uff1e {m}", False),
    ("small-ampersand", "probe x \ufe60 touch {m}", False),
    ("cyrillic-o-in-program", "pr\u043ebe x", False),
    ("zero-width-space", "probe x\u200btouch", False),
    ("right-to-left-override", "probe x\u202e", False),
    ("no-break-space", "probe\u00a0x", False),
    ("unbalanced-quote", "probe 'x", False),
    ("option-smuggling", "probe --output={m}", False),
    ("abbreviated-option-smuggling", "probe --out={m}", False),
    ("short-option-smuggling", "probe -o{m}", False),
    ("unlisted-program", "touch {m}", False),
    ("absolute-path-program", "/usr/bin/touch {m}", False),
    ("relative-path-program", "../bin/probe x", False),
    ("shell-interpreter", "sh -c probe", False),
    ("over-policy-length", "probe " + "a" * 1100, False),
    ("over-hard-length", "probe " + "a" * 5000, False),
]


@pytest.mark.parametrize(
    ("template", "_shell_creates_marker"),
    [pytest.param(t, s, id=i) for i, t, s in INJECTIONS],
)
def test_injection_attempt_is_refused_and_nothing_runs(
    sandbox: Sandbox, template: str, _shell_creates_marker: bool
) -> None:
    result = sandbox.run(template.format(m=sandbox.marker))
    assert not result.ok
    assert result.output.startswith(("refused:", "error: invalid arguments"))
    assert not sandbox.probe_log.exists(), "probe ran"
    assert not sandbox.marker.exists(), "the injected command ran"


def test_injection_table_is_large_and_its_shell_attacks_are_real(sandbox: Sandbox) -> None:
    """Control: the attempts flagged as shell attacks do create the marker under a real shell,
    so the test above would notice if one of them slipped through to a shell."""
    assert len(INJECTIONS) >= 30
    flagged = [(i, t) for i, t, creates in INJECTIONS if creates]
    for attempt_id, template in flagged:
        marker = sandbox.root / f"control-{attempt_id}"
        subprocess.run(
            ["/bin/sh", "-c", template.format(m=marker)],
            cwd=sandbox.work,
            env={"PATH": os.environ["PATH"], "IFS": " \t\n"},
            capture_output=True,
            timeout=10,
            check=False,
        )
        assert marker.exists(), f"{attempt_id} is not a working shell injection"


def test_positive_control_probe_records_a_permitted_run(sandbox: Sandbox) -> None:
    result = sandbox.run("probe 'hello world' --flag")
    assert result.ok
    assert result.meta["exit_code"] == 0
    assert "probe ran: hello world --flag" in result.output
    assert sandbox.probe_log.read_text() == "hello world --flag\n"


def test_option_smuggling_would_write_the_marker_if_permitted(sandbox: Sandbox) -> None:
    """Control for the smuggling cases: without the deny rules, and with patterns that
    explicitly accept any argument ({**}, so a path too), probe does write the file."""
    explicit = {
        "available_commands": [{"pattern": "probe {**}", "description": "anything"}],
        "allow": ["probe {**}"],
    }
    result = sandbox.run(f"probe --output={sandbox.marker}", deny=[], **explicit)
    assert result.ok
    assert sandbox.marker.exists()


def test_empty_command_is_refused(sandbox: Sandbox) -> None:
    for command in ("", "   ", "''"):
        result = sandbox.run(command)
        assert not result.ok
    assert not sandbox.probe_log.exists()


def test_program_is_never_taken_from_the_working_dir(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(sandbox.bin / "probe", sandbox.work / "probe")
    monkeypatch.chdir(sandbox.work)  # so '.' would find it from this process too
    monkeypatch.setenv("PATH", f".{os.pathsep}{os.pathsep}/usr/bin{os.pathsep}/bin")
    result = sandbox.run("probe x")
    assert not result.ok
    assert "not installed" in result.output
    assert not sandbox.probe_log.exists()


# --- running: exit codes, timeouts, leftovers, output cap, environment ------------------------


def test_nonzero_exit_is_reported_with_stderr(sandbox: Sandbox) -> None:
    result = sandbox.run("ls definitely-not-here")
    assert result.ok  # the command ran; its exit code is the information
    assert result.meta["exit_code"] != 0
    assert f"exit code: {result.meta['exit_code']}" in result.output
    assert "definitely-not-here" in result.output  # stderr is captured


def test_lost_exit_status_is_never_reported_as_success(sandbox: Sandbox) -> None:
    """With SIGCHLD ignored the kernel reaps children itself and subprocess would read 0."""
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        result = sandbox.run("ls definitely-not-here")
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert not result.ok
    assert result.meta["exit_code"] is None
    assert "exit code: 0" not in result.output
    assert "exit code unknown" in result.output


@pytest.mark.timeout(30)  # a regression must fail, not hang
def test_timeout_kills_the_child_and_its_grandchildren(sandbox: Sandbox) -> None:
    (sandbox.work / "spawn.sh").write_text(
        "sleep 300 &\necho $! > grandchild.pid\necho $$ > child.pid\nsleep 300\n"
    )
    started = time.monotonic()
    result = sandbox.run("sh spawn.sh", timeout_seconds=1)
    elapsed = time.monotonic() - started
    assert not result.ok
    assert result.meta["timed_out"] is True
    assert "timed out after 1 s" in result.output
    assert elapsed < 4
    child = int((sandbox.work / "child.pid").read_text())
    grandchild = int((sandbox.work / "grandchild.pid").read_text())
    assert _gone_within(child, 3), "the child survived the timeout"
    assert _gone_within(grandchild, 3), "the grandchild survived the timeout"


@pytest.mark.timeout(30)  # a regression must fail, not hang
def test_background_leftovers_are_killed_when_the_command_exits(sandbox: Sandbox) -> None:
    # The leftover keeps the output pipe open: the call must still return promptly.
    (sandbox.work / "leave.sh").write_text("sleep 300 &\necho $! > leftover.pid\necho started\n")
    started = time.monotonic()
    result = sandbox.run("sh leave.sh", timeout_seconds=10)
    assert result.ok
    assert result.meta["exit_code"] == 0
    assert "started" in result.output
    assert time.monotonic() - started < 5
    leftover = int((sandbox.work / "leftover.pid").read_text())
    assert _gone_within(leftover, 3), "a background process outlived the command"


def test_output_is_capped_with_a_marker(sandbox: Sandbox) -> None:
    result = sandbox.run("seq 200000", output_limit_bytes=1000)
    full_size = len("".join(f"{n}\n" for n in range(1, 200001)))
    assert result.ok
    assert result.truncated
    assert result.meta["output_bytes"] == full_size
    assert f"[output truncated by assay: first 1000 of {full_size} bytes shown]" in result.output
    assert result.output.count("\n") < 300
    assert "\n1\n2\n3\n" in result.output


def test_environment_is_scrubbed(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    canaries = {
        "AWS_SECRET_ACCESS_KEY": "canary-aws-5b1f",
        "ASSAY_API_KEY": "canary-assay-93c2",
        "GITHUB_TOKEN": "canary-github-7d40",
        "SOME_UNLISTED_VAR": "canary-plain-1e8a",
    }
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TZ", "canary-tz-allowed")
    result = sandbox.run("env", env_allow=["PATH", "TZ"])
    assert result.ok
    for name, value in canaries.items():
        assert name not in result.output
        assert value not in result.output
    assert "TZ=canary-tz-allowed" in result.output
    assert "PATH=" in result.output
    assert "HOME=" not in result.output  # only what env_allow names


@pytest.mark.timeout(30)  # a regression must fail, not hang
def test_stdin_is_closed(sandbox: Sandbox) -> None:
    (sandbox.work / "read.sh").write_text("read line || echo got-eof\n")
    result = sandbox.run("sh read.sh", timeout_seconds=3)
    assert result.ok
    assert "got-eof" in result.output


# --- the shipped example ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "runs"),
    [
        ("openssl s_client -connect api.internal:443 -servername api.internal", True),
        ("openssl x509 -noout -checkend 86400 -in api.pem", True),
        ("openssl x509 -noout -subject -issuer -dates -in api.pem", True),
        ("helm list -A -o json", True),
        ("helm status web -n prod -o json", True),
        ("date -u +%Y-%m-%dT%H:%M:%SZ", True),
        ("helm get values web", False),
        ("helm status web -n prod -o json --kubeconfig=/tmp/other", False),
        ("helm status --kube-context=other -n prod -o json", False),
        ("openssl s_client -connect a:443 -servername a -keylogfile k", False),
        ("openssl x509 -in api.pem -out copy.pem", False),
        ("date -s 2020-01-01", False),
        ("date -u -s 2020-01-01", False),
        ("kubectl get secrets", False),
    ],
)
def test_example_policy_decisions(command: str, runs: bool) -> None:
    policy = load_shell_policy(EXAMPLE_CONFIG)
    assert (policy.refusal_for(command.split()) is None) is runs


def test_example_policy_loads_with_a_usable_working_dir() -> None:
    policy = load_shell_policy(EXAMPLE_CONFIG)
    assert policy.working_dir == EXAMPLE_CONFIG.parent
    assert "KUBECONFIG" in policy.env_allow
    tool = RunCommandTool(policy)
    assert "NotAfter" in tool.description


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[int]:
    """A real TLS server (openssl s_server) on a free local port with a 30-day certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
            "-subj", "/CN=api.internal", "-keyout", str(tmp_path / "key.pem"),
            "-out", str(tmp_path / "cert.pem"),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            "openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-quiet",
            "-cert", str(tmp_path / "cert.pem"), "-key", str(tmp_path / "key.pem"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        server.kill()
        server.wait(timeout=10)


def test_example_policy_reads_a_certificate_expiry(tls_server: int, tmp_path: Path) -> None:
    """The example policy, with the test's TLS server added to its hosts (and only then)."""
    command = f"openssl s_client -connect 127.0.0.1:{tls_server} -servername api.internal"
    example = ToolRegistry(shell_tools(load_settings(shell_config=EXAMPLE_CONFIG)))
    assert not example.call("run_command", {"command": command}).ok  # not on its hosts list
    policy = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    policy["hosts"].append(f"127.0.0.1:{tls_server}")
    policy["working_dir"] = policy["files_dir"] = str(EXAMPLE_CONFIG.parent)
    config = tmp_path / "shell.yaml"
    config.write_text(yaml.safe_dump(policy))
    registry = ToolRegistry(shell_tools(load_settings(shell_config=config)))
    result = registry.call("run_command", {"command": command})
    assert result.ok, result.output
    assert "CN = api.internal" in result.output
    assert "NotAfter:" in result.output
