"""Socket timeouts kept by the kernel, so a send or receive is one GIL hand-over, not two.

With a Python-level timeout (``sock.settimeout(t)``) CPython makes every send and
receive a ``poll`` plus the call, and each of those system calls releases the
GIL; on a worker with many threads, taking it back from the others costs a
context switch (issue 15). The kernel's ``SO_RCVTIMEO`` / ``SO_SNDTIMEO`` on a
socket Python sees as blocking give the same bound per call with one system
call; a call that times out fails with EAGAIN (``BlockingIOError``) instead of
``TimeoutError``, which the callers (workers/core/keepalive_http.py,
workers/fleet/redis_client.py) translate.

Not for TLS sockets: on a blocking one, ``ssl`` retries a read the kernel timed
out (``SSL_ERROR_WANT_READ``) instead of raising, so the timeout never ends.
"""

from __future__ import annotations

import socket
import struct


def kernel_timeout(sock: socket.socket, seconds: float) -> None:
    """Each later send and receive on ``sock`` fails with EAGAIN after ``seconds``.

    The caller makes the socket blocking (``sock.settimeout(None)``) for it to apply
    alone; a Python-level timeout would still poll first.
    """
    seconds = max(seconds, 0.001)
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
