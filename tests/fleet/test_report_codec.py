"""Stored run reports: each codec round-trips, the dictionary's form is smaller, and every
form an earlier version wrote still reads; what cannot be read says so, never guesses."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.settings import AssaySettings
from tests.fleet_support import finished_report, snapshot_request
from workers.fleet.report_codec import CODECS, UnreadableReport, decode_report, encode_report
from workers.fleet.report_dictionary import REPORT_DICTIONARY_V1

REPORT = json.dumps({"run_id": "r-1", "steps": [{"output": "web-ok 3/3 " * 40}]})


def _three_step_report() -> str:
    """A finished report as the store writes it (pydantic's JSON of a RunReport)."""
    request = snapshot_request(text="every Deployment in namespace prod has 2 ready replicas")
    report = finished_report(request, "false", finished_at=datetime(2026, 11, 26, tzinfo=UTC))
    return report.model_dump_json()


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_reads_back_what_it_wrote(codec: str) -> None:
    for text in (REPORT, _three_step_report()):
        stored = encode_report(text, codec)  # type: ignore[arg-type]
        assert decode_report(stored) == text
        assert decode_report(stored.encode()) == text  # a raw (bytes) client reads it too


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=20_000))
def test_any_text_round_trips_through_the_dictionary(text: str) -> None:
    """The dictionary only helps: text that shares nothing with it (any Unicode, any size,
    longer than the window) reads back exactly."""
    assert decode_report(encode_report(text, "dictionary")) == text


def test_the_dictionary_stores_a_report_in_much_less_than_plain_zlib() -> None:
    text = _three_step_report()
    with_dictionary = encode_report(text, "dictionary")
    plain = encode_report(text, "zlib")
    assert with_dictionary.startswith("zd1:") and plain.startswith("z64:")
    assert len(with_dictionary) < 0.75 * len(plain), (len(with_dictionary), len(plain))


def test_plain_zlib_reads_the_dictionary_form_given_the_dictionary() -> None:
    """What docs/fleet.md tells an outside reader: Base64, then zlib with REPORT_DICTIONARY_V1."""
    text = _three_step_report()
    packed = base64.b64decode(encode_report(text, "dictionary")[len("zd1:") :])
    with pytest.raises(zlib.error):  # without it, zlib refuses (the stream names its dictionary)
        zlib.decompress(packed)
    inflater = zlib.decompressobj(zdict=REPORT_DICTIONARY_V1)
    assert (inflater.decompress(packed) + inflater.flush()).decode() == text


def test_dictionary_v1_never_changes() -> None:
    """Every report stored as zd1 needs these exact bytes; a new dictionary takes a new mark."""
    assert hashlib.sha256(REPORT_DICTIONARY_V1).hexdigest() == (
        "db3e2f3208de5ed706b459fc3fb3cad032d6ed9ee76b3bcb6cb8696b8d8b0ce4"
    )


def test_plain_and_base85_reports_written_by_earlier_versions_still_read() -> None:
    assert decode_report(encode_report(REPORT, "off")) == REPORT
    earlier = "z85:" + base64.b85encode(zlib.compress(REPORT.encode())).decode()
    assert decode_report(earlier) == REPORT


def test_a_large_report_round_trips_through_plain_zlib() -> None:
    """The small-window stream is ordinary zlib: any reader (an older assay) inflates it."""
    steps = [{"output": f"pod-{i} Running {i % 7}\n" * 50} for i in range(400)]
    large = json.dumps({"steps": steps})
    assert len(large) > 100_000  # longer than the compressor's window
    stored = encode_report(large, "zlib")
    assert zlib.decompress(base64.b64decode(stored[len("z64:") :])).decode() == large
    assert decode_report(stored) == large
    assert len(stored) < len(large) / 4
    assert decode_report(encode_report(large, "dictionary")) == large


def test_a_report_written_with_the_default_window_still_reads() -> None:
    earlier = "z64:" + base64.b64encode(zlib.compress(REPORT.encode(), 6)).decode()
    assert decode_report(earlier) == REPORT


@pytest.mark.parametrize("codec", ["dictionary", "zlib"])
def test_a_truncated_or_corrupt_report_is_refused_by_name(codec: str) -> None:
    stored = encode_report(_three_step_report(), codec)  # type: ignore[arg-type]
    mark, body = stored[:4], base64.b64decode(stored[4:])
    damaged = [
        stored[: len(stored) // 2],  # cut (Base64 padding broken)
        mark + base64.b64encode(body[: len(body) // 2]).decode(),  # a valid prefix of the stream
        mark + base64.b64encode(body + b"extra").decode(),  # trailing bytes
        mark + base64.b64encode(bytes(b ^ 0x55 for b in body)).decode(),  # every byte flipped
        mark + "not base64 at all!",
    ]
    for value in damaged:
        with pytest.raises(UnreadableReport, match="cannot be read"):
            decode_report(value)


@pytest.mark.parametrize("codec", ["dictionary", "zlib"])
def test_a_value_that_inflates_past_the_cap_is_refused_without_inflating_it(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zlib bomb planted in Redis: refused by name, and never inflated whole."""
    import workers.fleet.report_codec as codec_module

    monkeypatch.setattr(codec_module, "MAX_REPORT_BYTES", 1024 * 1024)
    bomb = encode_report("0" * (8 * 1024 * 1024), codec)  # type: ignore[arg-type]
    assert len(bomb) < 64 * 1024
    with pytest.raises(UnreadableReport, match="inflates to more than 1048576 bytes"):
        decode_report(bomb)
    at_the_cap = "0" * (1024 * 1024)
    assert decode_report(encode_report(at_the_cap, codec)) == at_the_cap  # type: ignore[arg-type]


def test_a_newer_codec_is_refused_as_such_not_read_as_json() -> None:
    with pytest.raises(UnreadableReport, match="newer"):
        decode_report("zd2:" + base64.b64encode(b"whatever a later version writes").decode())


@pytest.mark.parametrize(
    ("given", "codec"),
    [(True, "dictionary"), (False, "off"), ("true", "dictionary"), ("FALSE", "off"),
     ("zlib", "zlib"), ("Dictionary", "dictionary"), ("off", "off")],
)  # fmt: skip
def test_the_setting_takes_a_codec_or_an_earlier_boolean(given: object, codec: str) -> None:
    assert AssaySettings(report_compression=given).report_compression == codec


def test_an_unknown_codec_is_refused_when_the_settings_load() -> None:
    with pytest.raises(ValueError, match="report_compression"):
        AssaySettings(report_compression="zstd")
