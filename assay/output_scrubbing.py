"""What the CLI prints of a run passes the run's own secret scrubber first.

Model text (a thought, an explanation, an excerpt, a finding) is not tool
output, so the tool registry never scrubbed it: a model that read a Secret's
value in a lookup, or was told one in the prompt, can repeat it in any field.
``--trace`` lines and ``--json`` bodies are read in terminals and CI logs, so
they get the same treatment as the store and the logs: the run's
``SecretScrubber`` (the cluster's known Secret values, their base64 forms and
lines, plus the credential shapes), or the shapes alone (``PATTERNS``) when the
run never opened a cluster.

:class:`RunScrubber` wraps the engine's tools factory to keep hold of the
scrubber of the registry the run built; nothing else changes in the run.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from workers.engine.engine import ToolsFactory
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.factory import build_registry
from workers.engine.toolsets.redaction import PATTERNS, SecretScrubber

M = TypeVar("M", bound=BaseModel)


class RunScrubber:
    """The secret scrubber of one CLI run, learned from the tools the engine built."""

    def __init__(self, tools: ToolsFactory = build_registry) -> None:
        self._tools = tools
        self.scrubber: SecretScrubber = PATTERNS

    def tools(self, request: EvaluationRequest, settings: AssaySettings) -> ToolRegistry:
        """A tools factory for ``EngineDeps``: the wrapped one, remembering its scrubber."""
        registry = self._tools(request, settings)
        self.scrubber = registry.scrubber
        return registry

    def text(self, text: str) -> str:
        return self.scrubber.text(text)

    def data(self, value: Any) -> Any:
        """A scrubbed copy of a JSON-like value."""
        return self.scrubber.scrubbed_copy(value)

    def model(self, model: M) -> M:
        """A copy of ``model`` with every string scrubbed (the model itself is untouched)."""
        return type(model).model_validate(self.data(model.model_dump(mode="json")))
