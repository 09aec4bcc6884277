"""Fences around tool output: what a lookup returned is data, never instructions.

Everything a lookup returns comes from the cluster (or a snapshot, or a shell
command), and whoever can write a pod log, an annotation, an event or a custom
resource writes part of the model's prompt. So each result travels between two
fence lines carrying a token drawn per run::

    [step 3] logs {"namespace":"prod","pod":"api-1"} -> ok
    <<<TOOL OUTPUT 5f2c9a1be0d4e7a3>>>
    ...what the lookup returned...
    <<<END TOOL OUTPUT 5f2c9a1be0d4e7a3>>>

The token is random and new for every run, so text written into the cluster
beforehand cannot close the fence or open a fake one. Inside, anything that
imitates the engine's own markers is neutralised before the model sees it: a
fence line (``<<<`` / ``>>>`` runs) and a ``[step N]`` label, which the model
would otherwise take for a lookup result the engine labelled. The system
prompts (prompts/check.txt, query.txt, confirm.txt) tell the model what the
fences mean.
"""

from __future__ import annotations

import re
import secrets

from workers.engine.toolsets.echo import Marked, edited

TOOL_OUTPUT = "TOOL OUTPUT"
EVIDENCE = "EVIDENCE"
_STEP_LABEL = re.compile(r"\[\s*step\s+(\d+)\s*\]", re.IGNORECASE)
_ANGLE_RUN = re.compile(r"<{3,}|>{3,}")


def new_fence_token() -> str:
    """16 hex characters from the OS's CSPRNG: unguessable by whoever wrote the cluster."""
    return secrets.token_hex(8)


def neutralise(text: str, token: str) -> str:
    """``text`` with every imitation of a fence or a step label made harmless.

    ``[step 4]`` becomes ``[quoted step 4]``; ``<<<`` / ``>>>`` runs are broken up
    (``<< <``); the run's own token, should it ever appear, is replaced.
    """
    return neutralise_marked(Marked(text), token).text


def neutralise_marked(text: Marked, token: str) -> Marked:
    """:func:`neutralise` for Marked text, the spans that repeat the model's arguments
    carried along (workers/engine/toolsets/echo.py)."""
    if token and token in text.text:
        found = re.finditer(re.escape(token), text.text)
        text = edited(text, ((m.start(), m.end(), "[fence token]") for m in found))
    text = edited(
        text, ((m.start(), m.end(), " ".join(m.group(0))) for m in _ANGLE_RUN.finditer(text.text))
    )
    return edited(
        text,
        (
            (m.start(), m.end(), f"[quoted step {m.group(1)}]")
            for m in _STEP_LABEL.finditer(text.text)
        ),
    )


def fenced(text: str, token: str, label: str = TOOL_OUTPUT) -> str:
    """``text`` between the run's two fence lines; ``text`` must already be neutralised."""
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"<<<{label} {token}>>>\n{body}<<<END {label} {token}>>>"
