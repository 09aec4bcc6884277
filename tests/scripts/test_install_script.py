"""scripts/install.sh (run by scripts/demo.sh and scripts/test.sh) says what it is doing.

A first install takes a minute or more; before, it printed nothing for all of it
(`bash scripts/demo.sh` sat silent for about 75 s). These run the real script in a copy
of the repository's layout, with a stand-in ``python3`` whose venv's ``pip`` takes a few
seconds and writes pip-like lines, so no package is fetched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import ROOT

FAKE_PYTHON3 = """#!/usr/bin/env bash
# `python3 -m venv .venv`: a venv whose python's pip writes a few lines, slowly.
mkdir -p .venv/bin
cat > .venv/bin/python <<'EOF'
#!/usr/bin/env bash
case "$*" in
  *--upgrade\\ pip*) exit 0 ;;
esac
echo "Collecting fake-dependency==1.0"
sleep 3
echo "Installing collected packages: fake-dependency"
[ -n "${FAKE_PIP_FAILS:-}" ] && { echo "ERROR: no matching distribution"; exit 1; }
echo "Successfully installed fake-dependency-1.0"
EOF
chmod +x .venv/bin/python
"""


def run_install(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "install.sh", repo / "scripts" / "install.sh")
    (repo / "constraints.txt").write_text("")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name, body in (("python3", FAKE_PYTHON3), ("redis-server", "#!/bin/sh\n")):
        (fake_bin / name).write_text(body)
        (fake_bin / name).chmod(0o755)
    environment = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", **env}
    return subprocess.run(
        ["bash", str(repo / "scripts" / "install.sh")],
        capture_output=True, text=True, env=environment, timeout=60,
    )  # fmt: skip


def test_the_install_says_what_it_does_and_how_far_pip_is(tmp_path: Path) -> None:
    result = run_install(tmp_path, INSTALL_PROGRESS_EVERY="1")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "install: creating .venv"
    assert "about a minute the first time" in lines[1] and ".venv/install.log" in lines[1]
    progress = [line for line in lines if ", pip: " in line]
    assert progress and "Collecting fake-dependency==1.0" in progress[0], result.stderr
    assert lines[-1].startswith("install: done in ")


def test_a_failed_install_shows_pips_log_and_exits_1(tmp_path: Path) -> None:
    result = run_install(tmp_path, INSTALL_PROGRESS_EVERY="1", FAKE_PIP_FAILS="1")
    assert result.returncode == 1
    assert "ERROR: no matching distribution" in result.stderr
    assert "installing assay failed" in result.stderr


FAKE_APT_GET = '#!/bin/sh\necho "FAKE-APT-GET $*" >&2\n'
TOOLS = ("bash", "sh", "grep", "tail", "cut", "sleep", "cat", "mkdir", "chmod", "dirname")


def test_the_test_script_says_first_that_it_apt_installs_alertmanager(tmp_path: Path) -> None:
    """Before: `bash scripts/test.sh` said nothing up front of the apt-get install of
    prometheus-alertmanager it makes as root (its docs named only the test extras), as
    the demo's install says it adds redis-server. Run on a machine without Alertmanager,
    with a stand-in apt-get that only says what it was asked."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for script in ("install.sh", "test.sh"):
        shutil.copy(ROOT / "scripts" / script, repo / "scripts" / script)
    (repo / "constraints.txt").write_text("")
    fake_bin = tmp_path / "bin"  # these tools and nothing else: no Alertmanager on PATH
    fake_bin.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (fake_bin / tool).symlink_to(found)
    stand_ins = {"python3": FAKE_PYTHON3, "redis-server": "#!/bin/sh\n",
                 "apt-get": FAKE_APT_GET, "id": "#!/bin/sh\necho 0\n"}  # fmt: skip
    for name, body in stand_ins.items():
        (fake_bin / name).write_text(body)
        (fake_bin / name).chmod(0o755)
    result = subprocess.run(
        ["bash", str(repo / "scripts" / "test.sh")], capture_output=True, text=True,
        env={**os.environ, "PATH": str(fake_bin)}, timeout=60,
    )  # fmt: skip
    lines = result.stderr.splitlines()
    assert "prometheus-alertmanager via apt-get" in lines[0], result.stderr
    asked = next(i for i, line in enumerate(lines) if "FAKE-APT-GET install" in line)
    assert "prometheus-alertmanager" in lines[asked], result.stderr
    assert any("installing prometheus-alertmanager" in line for line in lines[:asked])
