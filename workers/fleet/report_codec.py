"""How a full run report is kept in Redis: compressed JSON, read back in either form.

Why: the report (every step, tool output as the model saw it, usage) is most of
what an evaluation leaves in Redis, about 7 of its 12.5 KB, and is kept for
``run_ttl_seconds``. It is read rarely (``assay runs show``, the API's run
view), so it is stored zlib-compressed, as Base85 text (the store's client
decodes responses as text). A field written before, plain JSON, still reads.
``ASSAY_REPORT_COMPRESSION=false`` stores plain JSON.
"""

from __future__ import annotations

import base64
import zlib

_MARK = "z85:"


def encode_report(report_json: str, compress: bool) -> str:
    """The value to store for a report's JSON."""
    if not compress:
        return report_json
    packed = base64.b85encode(zlib.compress(report_json.encode("utf-8"), 6)).decode("ascii")
    return _MARK + packed


def decode_report(stored: str | bytes) -> str:
    """The report's JSON from a stored value, compressed or plain."""
    text = stored.decode("utf-8") if isinstance(stored, bytes) else stored
    if not text.startswith(_MARK):
        return text
    return zlib.decompress(base64.b85decode(text[len(_MARK) :])).decode("utf-8")
