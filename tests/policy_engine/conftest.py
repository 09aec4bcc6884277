"""Fixtures of the policy engine's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def cli_store(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """``tmp_path``, where ``assay`` runs (its working folder) against the test's own Redis,
    keeping its data under ``tmp_path/data``."""
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path
