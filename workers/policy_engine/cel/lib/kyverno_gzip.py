"""Kyverno's ``gzip`` library, the half a check can answer exactly: ``gzip.decompress(b)``.

``gzip.decompress(bytes)`` is the text the gzip data holds, as Go's ``gzip.Reader`` reads it:
every member of concatenated gzip data, each header and trailer checked (CRC and size).
Empty data, data that is not gzip, truncated data, a bad checksum and bytes after the last
member that do not start another member are evaluation errors, as they are in Kyverno; so is
text that is not UTF-8 (Kyverno makes a Go string of any bytes, which a CEL string here
cannot hold), and so is text holding a NUL character (the runtime's strings would end at
it, where Kyverno's go on).

It is bounded as it inflates: each MB of output is charged as it is made (a small input
may inflate a thousandfold: a "gzip bomb"), and output past ``MAX_RESULT_CHARS`` refuses
the evaluation (never a verdict). ``gzip.compress`` is not served (policies/common.py
refuses it at import): its answer is the bytes of Go's own deflate encoder, which zlib's
encoder does not reproduce byte for byte, so a policy comparing them would be misjudged.
It answers only while an imported Kyverno ValidatingPolicy is run.
"""

from __future__ import annotations

import zlib

from workers.policy_engine.cel.lib.base import (
    READ_CHARS_PER_STEP,
    CelLibraryError,
    Overload,
    charge,
    check_result,
)
from workers.policy_engine.cel.lib.kyverno_resource import require_kyverno_policy

_GZIP = 16 + zlib.MAX_WBITS  # zlib reads a gzip header and trailer (checked) around deflate
_CHUNK = 1 << 20


def _member(data: bytes, out: list[bytes], made: int) -> tuple[bytes, int]:
    """Inflate the gzip member at the start of ``data`` into ``out``; the bytes after it
    and the output's length so far."""
    inflater = zlib.decompressobj(_GZIP)
    pending = data
    while True:
        try:
            piece = inflater.decompress(pending, _CHUNK)
        except zlib.error as error:
            raise CelLibraryError(f"gzip.decompress: the data is not gzip ({error})") from None
        made += len(piece)
        check_result(made, "gzip.decompress()")
        charge(1 + len(piece) // READ_CHARS_PER_STEP, "gzip.decompress()")
        out.append(piece)
        if inflater.eof:
            return inflater.unused_data, made
        pending = inflater.unconsumed_tail
        if not pending and not piece:
            raise CelLibraryError("gzip.decompress: the gzip data ends early")


def decompress(data: bytes) -> str:
    require_kyverno_policy("gzip.decompress")
    if not data:
        raise CelLibraryError("gzip.decompress: the data is empty (EOF)")
    out: list[bytes] = []
    made, rest = 0, bytes(data)
    while rest:  # Go's reader reads concatenated members as one stream
        rest, made = _member(rest, out, made)
    try:
        text = b"".join(out).decode("utf-8")
    except UnicodeDecodeError:
        raise CelLibraryError("gzip.decompress: the text is not UTF-8") from None
    if "\x00" in text:  # the runtime's bindings would cut the string at it
        raise CelLibraryError("gzip.decompress: the text holds a NUL character")
    return text


OVERLOADS = [
    Overload("gzip.decompress", "decompress_bytes_string", ("bytes",), "string", decompress),
]
