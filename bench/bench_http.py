"""CPU per chat-completion POST by HTTP client: why the direct path speaks HTTP/1.1 itself.

    .venv/bin/python bench/bench_http.py [--calls 2000]

Posts a chat request of about 10 KB (the size of a planner's third step) to a
local HTTP/1.1 server in another process, over one kept-alive connection, and
prints the client thread's CPU per call for httpx (what the OpenAI SDK and
litellm use), urllib3, the standard library's http.client (what keepalive_http.py
used before issue 15) and workers/core/keepalive_http.py. Prints
figures only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPLY = json.dumps(
    {"choices": [{"message": {"content": "x" * 300}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 2500, "completion_tokens": 60}}
).encode()  # fmt: skip
PAYLOAD = json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "y" * 10_000}], "max_tokens": 300}
).encode()
HEADERS = {"Authorization": "Bearer k", "Content-Type": "application/json"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as a model server would: no 40 ms wait per answer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(REPLY)))
        self.end_headers()
        self.wfile.write(REPLY)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(port_out: Any) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port_out.put(httpd.server_address[1])
    httpd.serve_forever()


def cpu_per_call(post: Callable[[], Any], calls: int) -> float:
    """Median over 5 rounds of this thread's CPU seconds per call."""
    post()
    rounds = []
    for _ in range(5):
        started = time.thread_time()
        for _ in range(calls // 5):
            post()
        rounds.append((time.thread_time() - started) / (calls // 5))
    return sorted(rounds)[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    ports: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get(timeout=10)}/v1/chat/completions"
    try:
        import http.client

        import httpx
        import urllib3

        from workers.core.keepalive_http import KeepAliveClient

        client = httpx.Client()
        pool = urllib3.PoolManager(retries=False)
        keepalive = KeepAliveClient()
        parts = url.split("/", 3)
        stdlib = http.client.HTTPConnection(parts[2], timeout=10)

        def stdlib_post() -> Any:
            stdlib.request("POST", "/" + parts[3], body=PAYLOAD, headers=HEADERS)
            return json.loads(stdlib.getresponse().read())

        figures = {
            "httpx (OpenAI SDK, litellm)": cpu_per_call(
                lambda: client.post(url, content=PAYLOAD, headers=HEADERS, timeout=10).json(),
                args.calls,
            ),
            "urllib3": cpu_per_call(
                lambda: json.loads(
                    pool.request("POST", url, body=PAYLOAD, headers=HEADERS, timeout=10).data
                ),
                args.calls,
            ),
            "http.client": cpu_per_call(stdlib_post, args.calls),
            "keepalive_http (direct path)": cpu_per_call(
                lambda: keepalive.post_json(url, PAYLOAD, HEADERS, 10).json(), args.calls
            ),
        }
    finally:
        server.terminate()
    print(f"bench_http: CPU per POST of {len(PAYLOAD) / 1000:.0f} KB, kept-alive, local server")
    for name, seconds in figures.items():
        print(f"  {name:30s} {seconds * 1e6:7.0f} us per call")


if __name__ == "__main__":
    main()
