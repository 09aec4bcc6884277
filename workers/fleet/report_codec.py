"""How a full run report is kept in Redis: compressed JSON, read back in either form.

Why: the report (every step, tool output as the model saw it, usage) is most of
what an evaluation leaves in Redis, about 7 of its 12.5 KB, and is kept for
``run_ttl_seconds``. It is read rarely (``assay runs show``, the API's run
view), so it is stored zlib-compressed, as Base64 text (the store's client
decodes responses as text; Base64 rather than the denser Base85 because Python's
Base85 is pure Python and cost a worker 0.3 ms per evaluation). Fields written
before, plain JSON or Base85, still read.
``ASSAY_REPORT_COMPRESSION=false`` stores plain JSON.

The compressor uses an 8 KB window and a small hash table, not zlib's 32 KB
default: setting up the default state (about 270 KB, cleared on every call) cost
about 50 us for a 3 KB report, ten times the compression itself. The output is
ordinary zlib; a report over 100 KB comes out about 4% larger.
"""

from __future__ import annotations

import base64
import zlib

_MARK = "z64:"
_BASE85_MARK = "z85:"  # written before; still read
_LEVEL, _WINDOW_BITS, _MEMORY_LEVEL = 6, 13, 5


def encode_report(report_json: str, compress: bool) -> str:
    """The value to store for a report's JSON."""
    if not compress:
        return report_json
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WINDOW_BITS, _MEMORY_LEVEL)
    packed = compressor.compress(report_json.encode("utf-8")) + compressor.flush()
    return _MARK + base64.b64encode(packed).decode("ascii")


def decode_report(stored: str | bytes) -> str:
    """The report's JSON from a stored value, compressed or plain."""
    text = stored.decode("utf-8") if isinstance(stored, bytes) else stored
    if text.startswith(_MARK):
        return zlib.decompress(base64.b64decode(text[len(_MARK) :])).decode("utf-8")
    if text.startswith(_BASE85_MARK):
        return zlib.decompress(base64.b85decode(text[len(_BASE85_MARK) :])).decode("utf-8")
    return text
