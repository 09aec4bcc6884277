"""CPU per chat-completion POST by HTTP client, one thread and 64: why the direct path uses urllib3.

    .venv/bin/python bench/bench_http.py [--calls 2000]

Posts a chat request of about 10 KB (the size of a planner's third step) to a local
HTTP/1.1 server in another process over kept-alive connections, and prints the
client process's CPU per call for httpx (what the OpenAI SDK and litellm use), urllib3
and the direct path's own client (workers/engine/openai_compat.py: urllib3, plus the
body bound, the deadline and the answer's parsing), first from one thread, then from
64 threads sharing one client, as a worker's runs do. Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPLY = json.dumps(
    {"choices": [{"message": {"content": "x" * 300}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 2500, "completion_tokens": 60}}
).encode()  # fmt: skip
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "y" * 10_000}], "max_tokens": 300}
BODY = json.dumps(PAYLOAD).encode()
HEADERS = {"Authorization": "Bearer k", "Content-Type": "application/json"}
THREADS = 64


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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 64 clients connect at once


def _serve(port_out: Any) -> None:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    port_out.put(httpd.server_address[1])
    httpd.serve_forever()


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_per_call(post: Callable[[], Any], calls: int, threads: int) -> float:
    """This process's CPU seconds per call, ``threads`` threads posting ``calls`` in all."""
    barrier = threading.Barrier(threads + 1)
    each = max(1, calls // threads)

    def work() -> None:
        post()  # each thread's connection is made before the clock starts
        barrier.wait()
        for _ in range(each):
            post()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = _cpu()
    for worker in workers:
        worker.join()
    return (_cpu() - started) / (each * threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    ports: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    base = f"http://127.0.0.1:{ports.get(timeout=10)}/v1"
    url = base + "/chat/completions"
    try:
        import httpx
        import urllib3

        from workers.engine.openai_compat import DirectClient

        clients: dict[str, Callable[[], Callable[[], Any]]] = {
            "httpx (OpenAI SDK, litellm)": lambda: _httpx_post(httpx, url),
            "urllib3": lambda: _urllib3_post(urllib3, url),
            "direct path (urllib3)": lambda: _direct_post(DirectClient(THREADS), base),
        }
        figures = {
            name: [cpu_per_call(make(), args.calls, threads) for threads in (1, THREADS)]
            for name, make in clients.items()
        }
    finally:
        server.terminate()
    print(f"bench_http: CPU per POST of {len(BODY) / 1000:.0f} KB, kept-alive, local server")
    print(f"  {'client':30s} {'1 thread':>10s} {f'{THREADS} threads':>11s}")
    for name, (alone, shared) in figures.items():
        print(f"  {name:30s} {alone * 1e6:7.0f} us {shared * 1e6:8.0f} us")


def _httpx_post(httpx: Any, url: str) -> Callable[[], Any]:
    client = httpx.Client(limits=httpx.Limits(max_connections=None, max_keepalive_connections=256))
    return lambda: client.post(url, content=BODY, headers=HEADERS, timeout=10).json()


def _urllib3_post(urllib3: Any, url: str) -> Callable[[], Any]:
    pool = urllib3.PoolManager(maxsize=256, retries=False)

    def post() -> Any:
        return json.loads(pool.request("POST", url, body=BODY, headers=HEADERS, timeout=10).data)

    return post


def _direct_post(client: Any, base: str) -> Callable[[], Any]:
    return lambda: client.complete(base, "k", PAYLOAD, 10)


if __name__ == "__main__":
    main()
