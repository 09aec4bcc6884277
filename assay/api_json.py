"""JSON request bodies read as strictly as files: a key given twice in one object is refused,
and so are NaN and Infinity, which are not JSON (RFC 8259) though Python's reader takes them.

Python's reader keeps the last of two equal keys silently, so ``{"source": "a", ...,
"source": "b"}`` would apply (and prune) source ``b`` while the caller's tooling showed
``a``. kubectl and the Kubernetes API server (strict field validation) refuse such a body;
``assay apply -f`` refuses the same in YAML (workers.engine.toolsets.yaml_documents). The
routers of the API take :class:`StrictJsonRoute` (FastAPI's documented custom-route hook),
so every body is read by :meth:`StrictJsonRequest.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute


class RepeatedKey(HTTPException):
    """A 422 ``duplicate_key`` naming the key (FastAPI passes an HTTPException raised while
    it reads the body on to the error handlers)."""

    code = "duplicate_key"

    def __init__(self, key: str) -> None:
        shown = key if len(key) <= 100 else key[:100] + "..."
        super().__init__(
            422, f"body: the key {shown!r} is given twice in one object; send each key once."
        )


def _each_key_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise RepeatedKey(key)
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    """NaN and Infinity, which Python's reader takes and JSON does not have (RFC 8259)."""
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(
                await self.body(), object_pairs_hook=_each_key_once, parse_constant=_no_constant
            )
        return self._json


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict
