"""Bearer-token auth for the HTTP API: who may read, who may also write.

Tokens come from ``settings.api_tokens`` and/or ``settings.api_tokens_file``
(a YAML or JSON mapping ``token: read|write``, typically a mounted Kubernetes
Secret; it is re-read when the file changes, so rotating the Secret needs no
restart). A presented token is compared with every known token using
``hmac.compare_digest``, without stopping at the first match, so response time
does not tell how much of a guess was right or which token it was close to.

A ``read`` token may call every GET; a ``write`` token may also submit, start
batches and change schedules. Without a token nothing but ``/healthz`` and
``/readyz`` answers, unless ``settings.api_allow_anonymous_read`` lets
anonymous callers read.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from assay.api_errors import ApiError

Scope = Literal["read", "write"]
_SCOPES: tuple[Scope, ...] = ("read", "write")
_WWW_AUTHENTICATE = {"WWW-Authenticate": 'Bearer realm="assay"'}


class TokenFileError(ValueError):
    pass


def parse_token_mapping(text: str, source: str) -> dict[str, Scope]:
    """``token -> scope`` from YAML or JSON text; anything else is a clear error."""
    try:
        data: Any = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise TokenFileError(f"{source} is not valid YAML or JSON: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TokenFileError(f"{source} must hold a mapping of token to read|write")
    tokens: dict[str, Scope] = {}
    for token, scope in data.items():
        if not isinstance(token, str) or not token:
            raise TokenFileError(f"{source} has an empty or non-string token")
        if scope not in _SCOPES:
            raise TokenFileError(f"{source}: scope must be 'read' or 'write', not {scope!r}")
        tokens[token] = scope
    return tokens


class TokenTable:
    """The known tokens and their scopes; the file part reloads when its mtime changes."""

    def __init__(self, tokens: dict[str, Scope], tokens_file: Path | None = None) -> None:
        self._static = dict(tokens)
        self._file = tokens_file
        self._file_mtime: float | None = None
        self._file_tokens: dict[str, Scope] = {}
        self._lock = threading.Lock()
        if tokens_file is not None:
            self._reload_file()  # a broken file at startup stops the API, loudly

    def _reload_file(self) -> None:
        assert self._file is not None
        try:
            mtime = self._file.stat().st_mtime
        except OSError as exc:
            raise TokenFileError(f"cannot read the API tokens file {self._file}: {exc}") from None
        if mtime == self._file_mtime:
            return
        tokens = parse_token_mapping(self._file.read_text(), str(self._file))
        self._file_tokens, self._file_mtime = tokens, mtime

    def _current(self) -> dict[str, Scope]:
        if self._file is not None:
            # a half-written rotation keeps the last good tokens
            with self._lock, contextlib.suppress(TokenFileError):
                self._reload_file()
        return {**self._file_tokens, **self._static}

    def scope_of(self, presented: str) -> Scope | None:
        """The scope of ``presented``, or None; every known token is compared, always."""
        candidate = presented.encode()
        found: Scope | None = None
        for token, scope in self._current().items():
            if hmac.compare_digest(candidate, token.encode()) and found != "write":
                found = scope
        return found

    def grants_write(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries a write token (read before the body,
        so only a writer may make the server hold a documents-sized body)."""
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and self.scope_of(token.strip()) == "write"

    def __len__(self) -> int:
        return len(self._current())


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="`Authorization: Bearer TOKEN`; read tokens may read, write tokens may also write.",
)


def _caller_scope(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Scope | None:
    """The caller's scope, ``None`` for an anonymous caller; a wrong token is refused here."""
    state = request.app.state
    if credentials is None:
        if request.headers.get("authorization"):
            raise ApiError(
                401,
                "invalid_authorization",
                "The Authorization header is not 'Bearer TOKEN'; send the token as a bearer token.",
                headers=_WWW_AUTHENTICATE,
            )
        return None
    scope = state.tokens.scope_of(credentials.credentials)
    if scope is None:
        raise ApiError(
            401,
            "invalid_token",
            "The bearer token is not valid; check the token you were given.",
            headers=_WWW_AUTHENTICATE,
        )
    return scope


def require_read(request: Request, scope: Annotated[Scope | None, Depends(_caller_scope)]) -> Scope:
    """Any valid token; anonymous only when the settings allow anonymous reads."""
    if scope is None:
        if request.app.state.settings.api_allow_anonymous_read:
            return "read"
        raise ApiError(
            401,
            "missing_token",
            "This endpoint needs a bearer token; send 'Authorization: Bearer TOKEN'.",
            headers=_WWW_AUTHENTICATE,
        )
    return scope


def require_write(scope: Annotated[Scope | None, Depends(_caller_scope)]) -> Scope:
    """A write token; a read token or no token is refused."""
    if scope is None:
        raise ApiError(
            401,
            "missing_token",
            "This endpoint needs a write token; send 'Authorization: Bearer TOKEN'.",
            headers=_WWW_AUTHENTICATE,
        )
    if scope != "write":
        raise ApiError(
            403,
            "insufficient_scope",
            "This token may only read; use a token with the write scope to change anything.",
        )
    return scope


ReadAccess = Annotated[Scope, Depends(require_read)]
WriteAccess = Annotated[Scope, Depends(require_write)]
