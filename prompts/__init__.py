"""The planner's system prompts, as text files next to this module, loaded by name."""

from __future__ import annotations

from functools import cache
from pathlib import Path

_DIR = Path(__file__).parent
# The first words of confirm.txt: how a test double tells a confirmation request from a
# planner request (assay/testing/scripted_model.py); a test keeps the two in step.
CONFIRMER_SIGNATURE = "You are assay's confirmer."


@cache
def load(name: str) -> str:
    """The prompt ``name`` (check, query, repair, ...); KeyError names the ones that exist."""
    path = _DIR / f"{name}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in _DIR.glob("*.txt")))
        raise KeyError(f"no prompt named {name!r}; known prompts: {known}")
    return path.read_text(encoding="utf-8")
