"""The bytes of a Redis command, as redis-py's own Python packer writes them, in one pass.

Why (issue 15): redis-py's ``PythonRespSerializer`` grows its buffer by joining it
with each argument in turn, so a command's bytes are copied once per argument. The
verdict's write is one EVALSHA with 29 arguments and about 3 KB: packing it cost a
worker 50 us, five times what collecting the pieces and joining them once costs (10 us),
on every evaluation. The output is the same byte for byte (tests compare the two over
generated commands), and so are its errors and its chunking: an argument over the
cutoff (or a ``memoryview``) is its own item of the list, sent without a copy.

Each argument is encoded by the connection's own encoder unless it is exactly ``str``,
``bytes`` or ``int`` (the encoder's result for those is known: UTF-8 text by the
connection's encoding, the bytes themselves, ``repr``); a bool, a float, a subclass or
anything else goes the encoder's way, with its errors.

Used by the store's connection class (``redis_client.quiet_connection_class``) when
redis-py would use its Python packer; with hiredis installed, hiredis packs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_CRLF = b"\r\n"


class RespPacker:
    """``pack(*args)``: a list of buffers whose concatenation is the command's RESP bytes."""

    __slots__ = ("_cutoff", "_encode", "_encoding", "_errors")

    def __init__(
        self, buffer_cutoff: int, encode: Callable[[Any], Any], encoding: str, errors: str
    ) -> None:
        self._cutoff = buffer_cutoff
        self._encode = encode
        self._encoding = encoding
        self._errors = errors

    def pack(self, *args: Any) -> list[Any]:
        # A command name may carry literal arguments ("CONFIG GET"): Redis wants them apart.
        if isinstance(args[0], str):
            args = tuple(args[0].encode().split()) + args[1:]
        elif b" " in args[0]:
            args = tuple(args[0].split()) + args[1:]
        cutoff, encoding, errors, encode = self._cutoff, self._encoding, self._errors, self._encode
        output: list[Any] = []
        pieces: list[bytes] = [b"*%d\r\n" % len(args)]
        size = len(pieces[0])
        for arg in args:
            kind = type(arg)
            if kind is str:
                data = arg.encode(encoding, errors)
            elif kind is bytes:
                data = arg
            elif kind is int:
                data = b"%d" % arg
            else:
                data = encode(arg)
            length = len(data)
            if size > cutoff or length > cutoff or isinstance(data, memoryview):
                # as redis-py: what is gathered so far and the argument's header in one buffer,
                # the argument itself apart (never copied), its CRLF opening the next buffer
                pieces.append(b"$%d\r\n" % length)
                output.append(b"".join(pieces))
                output.append(data)
                pieces, size = [_CRLF], 2
            else:
                header = b"$%d\r\n" % length
                pieces += (header, data, _CRLF)
                size += len(header) + length + 2
        output.append(b"".join(pieces))
        return output
