"""The README's fleet, schedule, client and API examples run as written, in order.

A newcomer copies them from the README into a shell in a fresh clone; this test
does the same: it extracts the fenced ``sh`` and ``python`` blocks of those
sections, runs them one command at a time in one bash session (so variables
carry over) in a fresh folder holding a copy of the repository's
``examples/``, with ``.venv/bin`` on PATH, no ``ASSAY_*`` settings and a
private ``ASSAY_DATA_DIR`` and HOME. Each command must exit with the code its
``# exit N`` comment names (0 without one). The fleet is the one the README
starts (``assay up --detach --scripted ...``): a private redis-server, a real
Celery worker and scheduler, and the scripted model over HTTP; nothing reaches
the internet. Wall times per command are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from assay.redis_process import free_port
from tests.conftest import ROOT

README = ROOT / "README.md"
WALKED_SECTIONS = ("## A walk through the main jobs",)
EXPECT = re.compile(r"#\s*exit (\d+)\b")
FENCE = re.compile(r"^```(sh|python)\n(.*?)^```", re.DOTALL | re.MULTILINE)
WALK_TIMEOUT_SECONDS = 600


def section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    following = text.find("\n## ", start + len(heading))
    return text[start : following if following != -1 else len(text)]


def readme_blocks() -> list[tuple[str, str]]:
    """(language, body) of every fenced sh/python block of the walked sections, in order."""
    text = README.read_text()
    blocks: list[tuple[str, str]] = []
    for heading in WALKED_SECTIONS:
        blocks += [(m.group(1), m.group(2)) for m in FENCE.finditer(section(text, heading))]
    return blocks


def shell_commands(body: str) -> list[str]:
    """Logical commands: backslash continuations and open single quotes join lines."""
    commands: list[str] = []
    current = ""
    for line in body.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current = f"{current}\n{line}" if current else line
        code = "\n".join(part.split(" # ", 1)[0] for part in current.splitlines())
        if code.rstrip().endswith("\\") or code.count("'") % 2 == 1:
            continue
        commands.append(current)
        current = ""
    assert not current, f"unterminated command in the README: {current!r}"
    return commands


def expected_code(command: str) -> int | None:
    """The ``# exit N`` of the command's last line; None for a background job (``&``)."""
    last = command.splitlines()[-1]
    code_part = last.split(" #", 1)[0].rstrip()
    if code_part.endswith("&"):
        return None
    found = EXPECT.search(last)
    return int(found.group(1)) if found else 0


def walk_script(blocks: list[tuple[str, str]], folder: Path) -> tuple[str, list[str]]:
    """One bash script running every command, checking its exit code, timing it."""
    lines = [
        "walk_check() {",
        '  if [ "$1" -ne "$2" ]; then',
        '    echo "README command $3 exited $1, expected $2" >&2; exit 90',
        "  fi",
        "}",
    ]
    shown: list[str] = []
    for number, (language, body) in enumerate(blocks):
        if language == "python":
            path = folder / f"readme_block_{number}.py"
            path.write_text(body)
            commands = [f"python {path.name}"]
        else:
            commands = shell_commands(body)
        for command in commands:
            index = len(shown)
            shown.append(command)
            want = expected_code(command)
            lines.append(f'echo "=== README command {index}" >&2; walk_t=$EPOCHREALTIME')
            lines.append(command)
            if want is not None:
                lines.append(f"walk_check $? {want} {index}")
            lines.append(f'echo "{index} $walk_t $EPOCHREALTIME" >> walk-times.txt')
    return "\n".join(lines) + "\n", shown


@pytest.fixture
def fresh_clone(tmp_path: Path) -> Path:
    folder = tmp_path / "clone"
    folder.mkdir()
    shutil.copytree(ROOT / "examples" / "snapshots", folder / "examples" / "snapshots")
    shutil.copytree(ROOT / "examples" / "scripts", folder / "examples" / "scripts")
    shutil.copytree(ROOT / "examples" / "policies", folder / "examples" / "policies")
    shutil.copytree(ROOT / "examples" / "checks", folder / "examples" / "checks")
    return folder


def walk_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path / "home")
    env["ASSAY_DATA_DIR"] = str(tmp_path / "data")
    env["ASSAY_API_PORT"] = str(free_port())
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def test_the_readme_examples_run_as_written(fresh_clone: Path, tmp_path: Path) -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 4, "the walked README sections lost their examples"
    script, commands = walk_script(blocks, fresh_clone)
    (fresh_clone / "walk.sh").write_text(script)
    env = walk_env(tmp_path)
    walk = subprocess.Popen(
        ["bash", "walk.sh"],
        cwd=fresh_clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = walk.communicate(timeout=WALK_TIMEOUT_SECONDS)
    finally:
        subprocess.run(
            [sys.executable, "-m", "assay.cli", "down"],
            cwd=fresh_clone,
            env=env,
            capture_output=True,
            timeout=60,
        )
        if walk.poll() is None:
            os.killpg(walk.pid, signal.SIGKILL)
            walk.wait(timeout=10)
        else:
            with contextlib.suppress(ProcessLookupError):  # a background `assay api` left
                os.killpg(walk.pid, signal.SIGTERM)
    times = _times(fresh_clone / "walk-times.txt", commands)
    print("\nREADME command wall times:\n" + times)
    assert walk.returncode == 0, f"{err[-4000:]}\n--- stdout ---\n{out[-3000:]}"
    # the walk really used the scripted model and the example fleet
    assert "snapshot:staging-us" in out and "FALSE" in out
    assert "due at" in err  # `assay verdict cert-ready` said when the deferred check runs


def _times(path: Path, commands: list[str]) -> str:
    if not path.exists():
        return "(none recorded)"
    rows = []
    for line in path.read_text().splitlines():
        index, start, end = line.split()
        first = commands[int(index)].splitlines()[0]
        rows.append(f"{float(end) - float(start):7.2f}s  {first[:90]}")
    return "\n".join(rows)


def test_the_reliability_commands_install_the_test_tools_first() -> None:
    """Before: after the demo (whose install has no test extras) the reliability suite's
    command (docs/testing.md, linked from the README) failed with "No module named pytest"."""
    text = (ROOT / "docs" / "testing.md").read_text()
    [block] = [m.group(2) for m in FENCE.finditer(text) if "tests/reliability" in m.group(2)]
    commands = shell_commands(block)
    assert commands[0].split(" #")[0].strip() == "bash scripts/install.sh test", commands
    assert all("pytest" in command for command in commands[1:])
