"""The folder a bench's command line names: a folder as is, or a bare git directory (a fetched
mirror, which has no work tree) read at its HEAD, ``GIT_DIR:SUBFOLDER`` for one folder of it.

Benches that read other projects' files (policy libraries, CRD schemas) read them from where
the user keeps them at run time, so assay ships none of them; this is the one reader of that
argument (bench/bench_cel.py, bench/check_admission_model.py).
"""

from __future__ import annotations

import argparse
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def is_bare_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def _present(git_dir: Path, paths: tuple[Path, ...]) -> list[str]:
    """Those of ``paths`` the repository's HEAD holds."""
    listed = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "--name-only", "HEAD", "--", *map(str, paths)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [str(p) for p in paths if str(p) in listed]


def folder_spec(spec: str) -> str:
    """``spec`` as a command line gave it, when it names a folder (or a bare git directory's
    folder) that is there; argparse's usage error otherwise, so a mistyped path is said, not
    read as an empty tree."""
    git_dir, _, under = spec.partition(":")
    path = Path(git_dir)
    if is_bare_git_dir(path):
        if under and not _present(path, (Path(under.rstrip("/")),)):
            raise argparse.ArgumentTypeError(f"{git_dir}'s HEAD holds no {under}")
        return spec
    if not (path / under if under else path).is_dir():
        raise argparse.ArgumentTypeError(f"{spec} is neither a folder nor a bare git directory")
    return spec


@contextmanager
def given_folder(spec: str, beside: tuple[Path, ...] = ()) -> Iterator[Path]:
    """The folder ``spec`` names. A bare git directory's HEAD is written to a temporary
    folder (removed on exit): the whole tree, or ``SUBFOLDER`` and those of ``beside`` (paths
    from the repository's root its reader also needs) that HEAD holds."""
    git_dir, _, under = spec.partition(":")
    path = Path(git_dir)
    if not is_bare_git_dir(path):
        yield path / under if under else path
        return
    with tempfile.TemporaryDirectory(prefix="assay-given-") as folder:
        archive = subprocess.run(
            [
                "git",
                f"--git-dir={path}",
                "archive",
                "--format=tar",
                "HEAD",
                *([under, *_present(path, beside)] if under else []),
            ],
            check=True,
            capture_output=True,
        ).stdout
        with tempfile.TemporaryFile() as tar_file:
            tar_file.write(archive)
            tar_file.seek(0)
            with tarfile.open(fileobj=tar_file) as tar:
                tar.extractall(folder, filter="data")
        yield Path(folder) / under if under else Path(folder)
