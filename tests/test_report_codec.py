"""Stored run reports read back whatever form an earlier version wrote them in."""

from __future__ import annotations

import base64
import json
import zlib

from workers.fleet.report_codec import decode_report, encode_report

REPORT = json.dumps({"run_id": "r-1", "steps": [{"output": "web-ok 3/3 " * 40}]})


def test_a_compressed_report_reads_back_and_is_smaller() -> None:
    stored = encode_report(REPORT, compress=True)
    assert len(stored) < len(REPORT) / 2
    assert decode_report(stored) == REPORT
    assert decode_report(stored.encode()) == REPORT  # a raw (bytes) client reads it too


def test_plain_and_base85_reports_written_by_earlier_versions_still_read() -> None:
    assert decode_report(encode_report(REPORT, compress=False)) == REPORT
    earlier = "z85:" + base64.b85encode(zlib.compress(REPORT.encode())).decode()
    assert decode_report(earlier) == REPORT


def test_a_large_report_round_trips_through_plain_zlib() -> None:
    """The small-window stream is ordinary zlib: any reader (an older assay) inflates it."""
    steps = [{"output": f"pod-{i} Running {i % 7}\n" * 50} for i in range(400)]
    large = json.dumps({"steps": steps})
    assert len(large) > 100_000  # longer than the compressor's window
    stored = encode_report(large, compress=True)
    assert zlib.decompress(base64.b64decode(stored[len("z64:") :])).decode() == large
    assert decode_report(stored) == large
    assert len(stored) < len(large) / 4


def test_a_report_written_with_the_default_window_still_reads() -> None:
    earlier = "z64:" + base64.b64encode(zlib.compress(REPORT.encode(), 6)).decode()
    assert decode_report(earlier) == REPORT
