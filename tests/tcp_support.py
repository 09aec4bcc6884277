"""A local TCP server whose connections a test serves by hand.

For clients that must be tried against exactly the bytes a gateway, an old
proxy or a hostile peer would send (tests/engine/test_llm_fast_path.py,
tests/engine/test_direct_http.py).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# serve(connection, stop, tally): tally() counts one exchange on this connection, returns it
Serve = Callable[[socket.socket, threading.Event, Callable[[], int]], None]


@contextmanager
def tcp_server(serve: Serve) -> Iterator[tuple[int, list[int]]]:
    """Listens on a free local port; each connection is ``serve``d on its own thread.

    Yields the port and, per accepted connection in order, how many exchanges its
    ``tally`` counted. ``stop`` is set when the block ends (a ``serve`` holding a
    connection open waits on it); each connection is closed once ``serve`` returns.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    exchanges: list[int] = []
    stop = threading.Event()

    def run(conn: socket.socket, index: int) -> None:
        def tally() -> int:
            exchanges[index] += 1
            return exchanges[index]

        with conn:
            serve(conn, stop, tally)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            exchanges.append(0)
            threading.Thread(target=run, args=(conn, len(exchanges) - 1), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], exchanges
    finally:
        stop.set()
        listener.close()


def read_request(conn: socket.socket) -> bytes:
    """One request's bytes (head and Content-Length body); b"" when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head
