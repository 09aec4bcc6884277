"""What a tool is, and the registry the engine offers to the model.

A tool's argument model is the single source of truth: the JSON schema the
model is shown is generated from it, and the same model validates what the
model sends back (the HolmesGPT toolset idea).

Every result leaves :meth:`ToolRegistry.call` through the run's
``SecretScrubber``, whatever the tool (Kubernetes on either backend, shell):
no tool has to remember to scrub, and no tool can forget.

A result says which parts of its output repeat the model's own arguments
(``ToolResult.echo``, see echo.py); the registry's own messages (an unknown
tool, invalid arguments, a crash) do the same, and the spans follow the text
through the scrubbing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from workers.engine.toolsets.backend import REDACTED
from workers.engine.toolsets.echo import Marked, Span, compose, echo, edited, quoted
from workers.engine.toolsets.redaction import PATTERNS, SecretScrubber


@dataclass(frozen=True)
class ToolResult:
    """What the model sees after a lookup. ``ok=False`` is still a normal result.

    ``echo``: the spans of ``output`` that repeat the model's own arguments, which
    never count as evidence (echo.py).
    """

    ok: bool
    output: str
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    echo: tuple[Span, ...] = ()

    @classmethod
    def of(
        cls, ok: bool, output: str | Marked, *, truncated: bool = False, **meta: Any
    ) -> ToolResult:
        """A result from Marked text (or plain text, which holds no echo)."""
        text = output if isinstance(output, Marked) else Marked(output)
        return cls(ok=ok, output=text.text, truncated=truncated, meta=meta, echo=text.echo)

    @property
    def marked(self) -> Marked:
        return Marked(self.output, self.echo)


class Tool(Protocol):
    name: str
    description: str
    args_model: type[BaseModel]

    def run(self, args: Any) -> ToolResult:
        """Run with validated arguments. Must not raise for expected failures."""
        ...


@cache
def _parameters_json(args_model: type[BaseModel]) -> str:
    return json.dumps(args_model.model_json_schema())


def _parameters_schema(args_model: type[BaseModel]) -> dict[str, Any]:
    """Generated once per argument model (pydantic takes ms per tool); a fresh copy each call."""
    parameters: dict[str, Any] = json.loads(_parameters_json(args_model))
    return parameters


class ToolRegistry:
    """The tools offered to one run, by name."""

    def __init__(
        self,
        tools: Iterable[Tool],
        closers: Iterable[Callable[[], None]] = (),
        scrubber: SecretScrubber = PATTERNS,
        backend: Any = None,
    ) -> None:
        # The cluster backend the Kubernetes tools read, for probes
        # (workers/policy_engine/probes/runner.py), which read the same objects unrendered;
        # None when the run has no cluster tools.
        self.backend = backend
        self._closers = list(closers)  # release per-run resources (a live client's connections)
        self.scrubber = scrubber
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools named {tool.name!r}")
            self._tools[tool.name] = tool

    def close(self) -> None:
        """Release what the tools hold; a failure here must not change the run's verdict."""
        for close in self._closers:
            with contextlib.suppress(Exception):  # best effort: the run is already decided
                close()
        self._closers.clear()

    def bind_deadline(self, deadline: float) -> None:
        """Every later lookup ends by this ``time.monotonic()`` instant: the run's deadline.

        Only a backend bound to one run takes it (a live cluster's); snapshot
        backends are shared by runs and answer from memory.
        """
        bind = getattr(self.backend, "bind_deadline", None)
        if callable(bind):
            bind(deadline)

    @property
    def names(self) -> set[str]:
        return set(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def get(self, name: str) -> Tool:
        return self._tools[name]

    def json_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function definitions generated from each tool's argument model."""
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": _parameters_schema(tool.args_model),
                },
            }
            for tool in self._tools.values()
        ]

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Validate and run; bad arguments and tool crashes become results, never exceptions.

        The output (and any text in ``meta``) is scrubbed of Secret values; the echo
        spans follow the scrubbed text.
        """
        result = self._call(name, arguments)
        redactions = self.scrubber.redactions(result.output)
        output = edited(result.marked, ((start, end, REDACTED) for start, end in redactions))
        return replace(
            result,
            output=output.text,
            echo=output.echo,
            meta=self.scrubber.scrubbed_copy(result.meta),
        )

    def _call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult.of(False, compose("error: unknown tool {}", quoted(name)))
        try:
            args = tool.args_model.model_validate(arguments)
        except ValidationError as exc:  # pydantic quotes the values it refused
            return ToolResult.of(
                False, compose("error: invalid arguments for {}: {}", name, echo(exc))
            )
        try:
            return tool.run(args)
        except Exception as exc:  # a tool bug must not end the run; the model sees it
            failure = compose("error: {} failed: {}: {}", name, type(exc).__name__, echo(exc))
            return ToolResult.of(False, failure)
