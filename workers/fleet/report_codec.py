"""How a full run report is kept in Redis: compressed JSON, read back in any form written.

Why: the report (every step, tool output as the model saw it, usage) is most of
what an evaluation leaves in Redis, and is kept for ``run_ttl_seconds``. It is
read rarely (``assay runs show``, the API's run view), so it is stored
zlib-compressed, as Base64 text (the store's client decodes responses as text;
Base64 rather than the denser Base85 because Python's Base85 is pure Python and
cost a worker 0.3 ms per evaluation).

``ASSAY_REPORT_COMPRESSION`` chooses how (:data:`CODECS`):

- ``dictionary`` (the default, mark ``zd1:``): zlib started from a preset
  dictionary of the report's schema (``report_dictionary.py``), at level 3. A
  3-step report's JSON (about 3 KB) is stored in about 600 bytes instead of 1,050,
  with about a third fewer instructions (issue 15). Plain zlib reads it given the
  same dictionary (``zlib.decompressobj(zdict=REPORT_DICTIONARY_V1)``); an assay
  older than this codec does not, so during an upgrade set ``zlib`` until every API
  and CLI that reads reports has the new version.
- ``zlib`` (mark ``z64:``): plain zlib at level 6, which any zlib reads.
- ``off``: plain JSON.

Every form written before still reads: plain JSON, ``z64:``, and Base85 (``z85:``).

The compressor uses an 8 KB window and a small hash table, not zlib's 32 KB
default: setting up the default state (about 270 KB, cleared on every call) cost
about 50 us for a 3 KB report, ten times the compression itself. The dictionary
codec copies a compressor already primed with its dictionary (``Compress.copy``,
which takes the object's lock, so threads share it safely) instead of loading the
dictionary for every report.
"""

from __future__ import annotations

import base64
import re
import zlib
from typing import get_args

from schemas.settings import ReportCodec
from workers.fleet.report_dictionary import REPORT_DICTIONARY_V1

CODECS: tuple[ReportCodec, ...] = get_args(ReportCodec)

_MARK = "z64:"
_DICTIONARY_MARK = "zd1:"
_BASE85_MARK = "z85:"  # written before; still read
# a mark this version does not know (a newer assay's): refused by name, never read as JSON
_ANY_MARK = re.compile(r"z[a-z0-9]{2}:")
# Far above any report the engine writes (tool output is capped per step, steps per run);
# a stored value that inflates past it is refused, not inflated.
MAX_REPORT_BYTES = 64 * 1024 * 1024
_LEVEL, _WINDOW_BITS, _MEMORY_LEVEL = 6, 13, 5
_DICTIONARY_LEVEL = 3  # with the dictionary, level 6 saves 50 bytes more for 30% more work
_PRIMED = zlib.compressobj(
    _DICTIONARY_LEVEL, zlib.DEFLATED, _WINDOW_BITS, _MEMORY_LEVEL, zdict=REPORT_DICTIONARY_V1
)


class UnreadableReport(ValueError):
    """A stored report this version cannot read: corrupt, truncated, or a newer codec's."""


def encode_report(report_json: str, codec: ReportCodec) -> str:
    """The value to store for a report's JSON."""
    if codec == "off":
        return report_json
    if codec == "dictionary":
        compressor = _PRIMED.copy()
        mark = _DICTIONARY_MARK
    else:
        compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WINDOW_BITS, _MEMORY_LEVEL)
        mark = _MARK
    packed = compressor.compress(report_json.encode("utf-8")) + compressor.flush()
    return mark + base64.b64encode(packed).decode("ascii")


def decode_report(stored: str | bytes) -> str:
    """The report's JSON from a stored value, in any form this or an earlier version wrote."""
    text = stored.decode("utf-8") if isinstance(stored, bytes) else stored
    mark, body = text[:4], text[4:]
    try:
        if mark == _DICTIONARY_MARK:
            return _inflated(base64.b64decode(body, validate=True), REPORT_DICTIONARY_V1)
        if mark == _MARK:
            return _inflated(base64.b64decode(body, validate=True))
        if mark == _BASE85_MARK:
            return _inflated(base64.b85decode(body))
    except (zlib.error, ValueError) as exc:  # binascii.Error and UnicodeDecodeError included
        raise UnreadableReport(f"the stored report ({mark}) cannot be read: {exc}") from exc
    if _ANY_MARK.fullmatch(mark):
        raise UnreadableReport(
            f"the stored report is in a form this version of assay does not know ({mark}); "
            "it was written by a newer one"
        )
    return text


def _inflated(packed: bytes, dictionary: bytes | None = None) -> str:
    """One whole zlib stream, nothing after it (``zlib.decompress`` ignores trailing bytes),
    inflating to at most :data:`MAX_REPORT_BYTES`: a value planted in Redis that inflates a
    thousandfold must not take the API's memory with it."""
    inflater = zlib.decompressobj(zdict=dictionary) if dictionary else zlib.decompressobj()
    raw = inflater.decompress(packed, MAX_REPORT_BYTES + 1)
    if len(raw) > MAX_REPORT_BYTES:
        raise ValueError(f"it inflates to more than {MAX_REPORT_BYTES} bytes")
    if not inflater.eof or inflater.unused_data:
        raise ValueError("the stream is truncated or has bytes after its end")
    return raw.decode("utf-8")
