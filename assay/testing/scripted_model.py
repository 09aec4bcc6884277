"""An OpenAI-compatible chat-completions server that replays a script. It is not an LLM.

It lets the demo, the tests and the benchmarks drive the real engine through
litellm's normal client path (model ``openai/<anything>``, ``api_base`` = this
server) with answers known in advance, including the faults a real provider
produces: rate limits with Retry-After, 5xx, hangs, malformed bodies.

A script is YAML or JSON (format in docs/ARCHITECTURE.md). The server keeps no
per-conversation state except retry counters: the turn a request answers is
the number of assistant messages it holds, so many runs (told apart by the
request's ``user`` field, where the engine puts the run id) replay the same
script at once without interfering.

Use it in-process (``ScriptedModel(script).start()``) or as a process:
``python -m assay.testing.scripted_model --script F --port P [--record FILE]``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from assay.testing.obedient import newest_tool_result, planted_action
from prompts import CONFIRMER_SIGNATURE
from schemas.actions import ACTION_TOOL_NAMES, PlannerResponse, action_to_tool_call

SCRIPTED_MODEL_NAME = "openai/scripted"
_TOOL_FOR_ACTION = {action: tool for tool, action in ACTION_TOOL_NAMES.items()}
_CHARS_PER_TOKEN = 4
_MESSAGE_OVERHEAD_TOKENS = 4


class ScriptError(ValueError):
    """The script file is missing or does not follow the format."""


# --------------------------------------------------------------------------- script format


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorSpec(_Strict):
    status: int = Field(default=500, ge=400, le=599)
    body: str | dict[str, Any] | None = None
    retry_after: float | None = Field(default=None, ge=0)


class UsageSpec(_Strict):
    """Usage to report instead of the estimate. Any number is sent as written, even a negative,
    fractional or absurdly large one, or a string: a misbehaving provider is a fault to replay."""

    prompt_tokens: int | float | str | None = None
    completion_tokens: int | float | str | None = None


class ToolCallSpec(_Strict):
    """A raw tool call, for outputs no valid action produces (bad argument JSON, odd names)."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


_ANSWER_FIELDS = ("action", "tool_call", "text", "raw_content", "body", "error", "when", "attempts")


class Entry(_Strict):
    """One answer. Exactly one answer field, or ``hang`` alone (then the answer is a 504)."""

    action: dict[str, Any] | None = None
    tool_call: ToolCallSpec | None = None
    text: str | None = None
    raw_content: str | None = None
    body: str | None = None
    error: ErrorSpec | None = None
    when: list[WhenEntry] | None = None
    attempts: list[Entry] | None = Field(default=None, min_length=1)
    usage: UsageSpec | None = None
    delay: float | None = Field(default=None, ge=0)
    hang: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_answer(self) -> Entry:
        given = [name for name in _ANSWER_FIELDS if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"an entry has one answer, this one has {', '.join(given)}")
        if not given and self.hang is None:
            raise ValueError(f"an entry needs one of: {', '.join(_ANSWER_FIELDS)}, or hang")
        return self


class WhenEntry(Entry):
    """An answer chosen when the last tool result contains ``if_contains`` (omit = default)."""

    if_contains: str | None = None


Entry.model_rebuild()


Role = Literal["planner", "confirmer"]


class Scenario(_Strict):
    match: str | None = Field(default=None, description="Regex searched in the first user message.")
    role: Role = Field(
        default="planner",
        description="Which requests it answers: the planner's, or the strict profile's "
        "confirmation (a request whose system prompt is prompts/confirm.txt).",
    )
    turns: list[Entry] = Field(min_length=1)

    @model_validator(mode="after")
    def _regex_compiles(self) -> Scenario:
        if self.match is not None:
            try:
                re.compile(self.match)
            except re.error as exc:
                raise ValueError(f"match {self.match!r} is not a valid regex: {exc}") from exc
        return self


class LogNormalLatency(_Strict):
    """Latency like a hosted model's: log-normal, most answers near ``median``, a long tail.

    ``p99`` sets the spread (the 99th percentile: ``median * exp(2.326 * sigma)``). Draws come
    from a generator seeded with ``seed``, so a bench's waves see the same latencies.
    """

    median: float = Field(gt=0, description="Seconds half the answers take at most.")
    p99: float = Field(gt=0, description="Seconds 99 of 100 answers take at most.")
    seed: int = 0

    @model_validator(mode="after")
    def _tail_above_median(self) -> LogNormalLatency:
        if self.p99 < self.median:
            raise ValueError("p99 must be at least the median")
        return self

    @property
    def sigma(self) -> float:
        return math.log(self.p99 / self.median) / _Z_99

    @property
    def mean(self) -> float:
        """The expected latency: ``median * exp(sigma**2 / 2)``."""
        return self.median * math.exp(self.sigma**2 / 2)


_Z_99 = 2.3263478740408408  # the standard normal's 99th percentile


class Script(_Strict):
    scenarios: list[Scenario] = Field(min_length=1)
    delay: float = Field(default=0.0, ge=0, description="Default delay before every answer.")
    latency: LogNormalLatency | None = Field(
        default=None,
        description="Instead of ``delay``: each answer without a delay of its own waits a "
        "draw from this distribution (bench/bench_fleet.py's hosted-model profile).",
    )
    obey_injections: bool = Field(
        default=False,
        description="Act like a gullible LLM: follow instructions planted in the newest tool "
        "result (assay/testing/obedient.py) instead of the script.",
    )


def load_script(source: Script | dict[str, Any] | str | Path) -> Script:
    """A script from a model, a dict, or a YAML/JSON file path; ScriptError says what is wrong."""
    if isinstance(source, Script):
        return source
    data: Any = source
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise ScriptError(f"scripted model script {path} does not exist: pass a YAML file path")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ScriptError(f"scripted model script {path} is not valid YAML: {exc}") from exc
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ScriptError(f"scripted model script does not follow the format: {exc}") from exc


# --------------------------------------------------------------------------- replay logic


class _Reply:
    """What to send back for one request."""

    def __init__(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        usage: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.delay = delay
        self.usage = usage


def estimate_tokens(text: str) -> int:
    """The default usage figure: about four characters per token, like most BPE tokenizers."""
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


def _prompt_tokens(body: dict[str, Any]) -> int:
    total = 0
    for message in body.get("messages") or []:
        total += _MESSAGE_OVERHEAD_TOKENS + estimate_tokens(_content_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            total += estimate_tokens(json.dumps(call.get("function", {})))
    if body.get("tools"):
        total += _tools_estimate(body["tools"])
    if body.get("response_format"):
        total += estimate_tokens(json.dumps(body["response_format"]))
    return total


class _ToolsEstimates:
    """The token estimate of a tool list, remembered for the next request that sends it again.

    Why: a client sends the same tool list (often 10 KB of JSON schemas) with every
    request, and encoding it again to measure it was a fifth of this server's CPU
    in bench_fleet. A remembered list is reused only if it equals the new one.
    """

    _MAX = 32

    def __init__(self) -> None:
        self._known: dict[tuple[Any, ...], tuple[Any, int]] = {}

    def __call__(self, tools: Any) -> int:
        key = _tools_key(tools)
        known = self._known.get(key)
        if known is not None and known[0] == tools:
            return known[1]
        estimate = estimate_tokens(json.dumps(tools))
        if len(self._known) >= self._MAX:
            self._known.clear()
        self._known[key] = (tools, estimate)
        return estimate


def _tools_key(tools: Any) -> tuple[Any, ...]:
    if not isinstance(tools, list):
        return (type(tools).__name__,)
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        names.append(str(function.get("name")) if isinstance(function, dict) else "?")
    return tuple(names)


_tools_estimate = _ToolsEstimates()


def _error_body(message: str, kind: str, code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def _action_as_tool_call(action: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The same mapping the engine reads back; deliberately invalid actions map by hand."""
    try:
        parsed = PlannerResponse.model_validate({"action": action}).action
        if getattr(parsed, "probe_dropped", None):  # an invalid probe goes out as written
            raise ValueError("sent by hand")
    except (ValidationError, ValueError):
        kind = str(action.get("action", ""))
        if kind == "COMMAND":
            args = dict(action.get("arguments") or {})
            if action.get("reason"):
                args["reason"] = action["reason"]
            return str(action.get("tool", "")), args
        rest = {k: v for k, v in action.items() if k != "action"}
        return _TOOL_FOR_ACTION.get(kind, kind.lower() or "unknown"), rest
    return action_to_tool_call(parsed)


class Replayer:
    """Chooses the answer for each request; thread-safe; independent of HTTP."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self._attempts: dict[tuple[str, int, int], int] = {}
        self._lock = threading.Lock()
        self.obeyed: list[dict[str, Any]] = []
        latency = script.latency
        self._draws = random.Random(latency.seed) if latency is not None else None

    def _default_delay(self) -> float:
        latency = self.script.latency
        if latency is None or self._draws is None:
            return self.script.delay
        with self._lock:
            return self._draws.lognormvariate(math.log(latency.median), latency.sigma)

    def reply(self, body: dict[str, Any]) -> _Reply:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _Reply(400, _error_body("messages must be a non-empty list", "invalid_request"))
        system = next(
            (_content_text(m.get("content")) for m in messages if m.get("role") == "system"), ""
        )
        role: Role = "confirmer" if system.startswith(CONFIRMER_SIGNATURE) else "planner"
        if self.script.obey_injections:
            planted = planted_action(newest_tool_result(messages))
            if planted is not None:
                with self._lock:
                    self.obeyed.append({"user": body.get("user"), "role": role, "action": planted})
                return self._render(Entry(action=planted), body)
        first_user = next(
            (_content_text(m.get("content")) for m in messages if m.get("role") == "user"), ""
        )
        index, scenario = self._scenario_for(first_user, role)
        if scenario is None:
            return _Reply(
                400,
                _error_body("no scenario of the script matches this request", "invalid_request"),
            )
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= len(scenario.turns):
            message = f"the script has no turn {turn} (scenario {index} has {len(scenario.turns)})"
            return _Reply(400, _error_body(message, "invalid_request", "script_exhausted"))
        entry = scenario.turns[turn]
        # A delay written on an entry that holds options applies to whichever option answers,
        # unless the option has its own; otherwise a `when` turn would answer at once.
        delay = entry.delay
        if entry.attempts:
            key = (str(body.get("user") or ""), index, turn)
            with self._lock:
                attempt = self._attempts.get(key, 0)
                self._attempts[key] = attempt + 1
            entry = entry.attempts[min(attempt, len(entry.attempts) - 1)]
            delay = entry.delay if entry.delay is not None else delay
        if entry.when:
            entry = self._pick_when(entry.when, _last_tool_result(messages))
            delay = entry.delay if entry.delay is not None else delay
        return self._render(entry, body, delay)

    def _scenario_for(self, first_user: str, role: Role) -> tuple[int, Scenario | None]:
        for index, scenario in enumerate(self.script.scenarios):
            if scenario.role != role:
                continue
            if scenario.match is None or re.search(scenario.match, first_user, re.IGNORECASE):
                return index, scenario
        return -1, None

    @staticmethod
    def _pick_when(options: list[WhenEntry], last_result: str) -> Entry:
        for option in options:
            if option.if_contains is None or option.if_contains in last_result:
                return option
        return Entry(error=ErrorSpec(status=400, body="no `when` option matched the tool result"))

    def _render(self, entry: Entry, body: dict[str, Any], delay: float | None = None) -> _Reply:
        if delay is None:
            delay = entry.delay if entry.delay is not None else self._default_delay()
        if entry.hang is not None:
            delay += entry.hang
        if entry.error is not None:
            return self._render_error(entry.error, delay)
        if entry.body is not None:
            return _Reply(200, entry.body.encode(), delay=delay)
        if entry.hang is not None and all(getattr(entry, f) is None for f in _ANSWER_FIELDS):
            return _Reply(504, _error_body("scripted hang ended", "timeout"), delay=delay)
        message, finish = self._message(entry, body)
        completion_text = _content_text(message.get("content")) + "".join(
            call["function"]["arguments"] for call in message.get("tool_calls", [])
        )
        usage = entry.usage or UsageSpec()
        prompt = usage.prompt_tokens if usage.prompt_tokens is not None else _prompt_tokens(body)
        completion = usage.completion_tokens
        if completion is None:
            completion = estimate_tokens(completion_text) + 1
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(cap, int) and isinstance(completion, int) and completion > cap:
            # A real server stops generating at the cap: the output is cut and says so.
            completion, finish = cap, "length"
            message = _cut_message(message, cap * _CHARS_PER_TOKEN)
        numbers = (prompt, completion)
        summable = all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers)
        usage_payload = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion if summable else 0,  # type: ignore[operator]
        }
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage_payload,
        }
        return _Reply(200, json.dumps(payload).encode(), delay=delay, usage=usage_payload)

    @staticmethod
    def _render_error(error: ErrorSpec, delay: float) -> _Reply:
        if isinstance(error.body, dict):
            raw = json.dumps(error.body).encode()
        else:
            text = error.body or f"scripted error {error.status}"
            kind = "rate_limit_error" if error.status == 429 else "server_error"
            raw = _error_body(text, kind, str(error.status))
        headers = {}
        if error.retry_after is not None:
            headers["Retry-After"] = f"{error.retry_after:g}"
        return _Reply(error.status, raw, headers, delay=delay)

    @staticmethod
    def _message(entry: Entry, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        wants_json = bool(body.get("response_format"))
        offers_tools = bool(body.get("tools")) and not wants_json
        if entry.text is not None or entry.raw_content is not None:
            content = entry.text if entry.text is not None else entry.raw_content
            return {"role": "assistant", "content": content}, "stop"
        if entry.tool_call is not None:
            name, arguments = entry.tool_call.name, entry.tool_call.arguments
        else:
            assert entry.action is not None
            if not offers_tools:
                content = json.dumps({"action": entry.action})
                return {"role": "assistant", "content": content}, "stop"
            name, arguments = _action_as_tool_call(entry.action)
        raw_args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = {
            "id": f"call_{uuid.uuid4().hex[:20]}",
            "type": "function",
            "function": {"name": name, "arguments": raw_args},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


def _last_tool_result(messages: list[dict[str, Any]]) -> str:
    """The newest tool output: a ``tool`` message, or a ``user`` message in JSON mode."""
    for message in reversed(messages):
        if message.get("role") in ("tool", "user"):
            return _content_text(message.get("content"))
    return ""


def _cut_message(message: dict[str, Any], max_chars: int) -> dict[str, Any]:
    cut = dict(message)
    if cut.get("content"):
        cut["content"] = cut["content"][:max_chars]
    if cut.get("tool_calls"):
        calls = []
        for call in cut["tool_calls"]:
            function = dict(call["function"])
            function["arguments"] = function["arguments"][:max_chars]
            calls.append({**call, "function": function})
        cut["tool_calls"] = calls
    return cut


# --------------------------------------------------------------------------- HTTP server


SHUTDOWN_POLL_SECONDS = 0.02


class _Server(ThreadingHTTPServer):
    """A threading HTTP server with a listen backlog like a real model server's.

    socketserver's default backlog is 5: when a fleet worker's 200 threads open
    their first connections at once, the kernel drops the overflow and each of
    those clients waits a full second for TCP to retry, a delay no real
    endpoint (uvicorn's backlog is 2048) would add.
    """

    request_queue_size = 1024


class ScriptedModel:
    """The server, in-process: ``with ScriptedModel(path) as model: ... model.url``."""

    def __init__(
        self,
        script: Script | dict[str, Any] | str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        record: str | Path | None = None,
        keep_requests: bool = True,
    ) -> None:
        """``keep_requests=False``: a long-running server whose requests nobody reads.

        Why: every request body (a run's whole conversation and tool list) kept in
        memory for ``requests`` grows the process without bound over a fleet's
        hours and makes each of the garbage collector's full passes walk it;
        ``--record`` still writes them to a file.
        """
        self.replayer = Replayer(load_script(script))
        self._keep_requests = keep_requests
        self._host = host
        self._port = port
        self._record_path = Path(record) if record else None
        self._requests: list[dict[str, Any]] = []
        self._usage: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The ``api_base`` to give litellm."""
        if self._server is None:
            raise RuntimeError("the scripted model is not running: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received so far, in arrival order."""
        self._require_kept()
        with self._lock:
            return list(self._requests)

    @property
    def usage_reported(self) -> list[dict[str, Any]]:
        """The usage block of every completion sent, with the ``user`` it was sent to."""
        self._require_kept()
        with self._lock:
            return list(self._usage)

    @property
    def obeyed(self) -> list[dict[str, Any]]:
        """Every answer taken from planted text (``obey_injections``): user, role, action."""
        with self.replayer._lock:
            return list(self.replayer.obeyed)

    def requests_for(self, user: str) -> list[dict[str, Any]]:
        """The request bodies of one conversation (the engine sends the run id as ``user``)."""
        return [body for body in self.requests if body.get("user") == user]

    def start(self) -> ScriptedModel:
        self._server = _Server((self._host, self._port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            # stop() waits for the loop's next look: socketserver's default half second
            # was most of the wall time `assay check --scripted` spent after its verdict
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            name="scripted-model",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _require_kept(self) -> None:
        if not self._keep_requests:
            raise RuntimeError(
                "this scripted model was started with keep_requests=False; "
                "start it with keep_requests=True (or --record FILE) to see its requests"
            )

    def _record(self, body: dict[str, Any]) -> None:
        if not self._keep_requests and self._record_path is None:
            return
        with self._lock:
            if self._keep_requests:
                self._requests.append(body)
            if self._record_path is not None:
                with self._record_path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(body) + "\n")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # An answer's head and body are buffered and leave in one write, as a real model
            # server's do: two writes cost the client a second receive (and this server a
            # second send) on every call, which bench_fleet charged to the worker (issue 15).
            # An answer over the buffer still leaves in two; Nagle's algorithm is off so
            # that its body does not wait for the client's delayed ACK (~40 ms).
            wbufsize = 64 * 1024
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet by design
                return None

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    listing = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                    self._send(_Reply(200, json.dumps(listing).encode()))
                else:
                    self._send(_Reply(404, _error_body(f"no route {self.path}", "not_found")))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(_Reply(404, _error_body(f"no route {self.path}", "not_found")))
                    return
                try:
                    body = json.loads(raw or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("the body is not a JSON object")
                except ValueError as exc:
                    self._send(_Reply(400, _error_body(f"bad request body: {exc}", "invalid")))
                    return
                model._record(body)
                try:
                    reply = model.replayer.reply(body)
                except Exception as exc:  # a bug here must show up as an HTTP error, not a hang
                    reply = _Reply(500, _error_body(f"scripted model failed: {exc!r}", "server"))
                if reply.delay and model._stopping.wait(reply.delay):
                    return
                if reply.usage is not None and model._keep_requests:
                    with model._lock:
                        model._usage.append({**reply.usage, "user": body.get("user")})
                self._send(reply)

            def _send(self, reply: _Reply) -> None:
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply.body)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(reply.body)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    # the client gave up (timeout): nothing left to tell it, and what is still
                    # buffered must not be sent again when the request's handling ends
                    self.close_connection = True
                    self.wfile = io.BytesIO()

        return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m assay.testing.scripted_model",
        description="Serve a scripted OpenAI-compatible chat-completions endpoint (not an LLM).",
    )
    parser.add_argument("--script", required=True, help="YAML/JSON script file")
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--record", help="append every request body to this JSONL file")
    args = parser.parse_args(argv)
    try:
        server = ScriptedModel(
            args.script, host=args.host, port=args.port, record=args.record, keep_requests=False
        )
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 64
    server.start()
    print(
        f"SCRIPTED MODEL - replaying {args.script}, not a real LLM - api_base {server.url}",
        file=sys.stderr,
        flush=True,
    )
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
