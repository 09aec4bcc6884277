"""What the secret scrubber costs: ms per MB of tool output, µs per object, learning time.

Text is rendered YAML of synthetic pods interleaved with log lines (what the
tools return; no provider token in it, then once more with one every 4 KB); the
known values are random, as a cluster's Secrets would be
(three keys per Secret, one of them a multi-line PEM-like value). Also shows
why the known values are matched with Aho-Corasick: the same search as one
regex alternation, on a tenth of the text. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_scrubber.py [SECRETS]      # default 500 Secrets
"""

from __future__ import annotations

import base64
import re
import secrets
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.testing.fake_cluster import FakeCluster  # noqa: E402
from workers.engine.toolsets.redaction import SecretScrubber, secret_forms  # noqa: E402

MB = 1024 * 1024


def known_values(secret_count: int) -> list[str]:
    values: list[str] = []
    for _ in range(secret_count):
        pem_lines = [base64.b64encode(secrets.token_bytes(48)).decode() for _ in range(25)]
        values += [
            secrets.token_urlsafe(18),
            f"postgres://app:{secrets.token_urlsafe(12)}@db:5432/app",
            "-----BEGIN PRIVATE KEY-----\n" + "\n".join(pem_lines) + "\n-----END PRIVATE KEY-----",
        ]
    return values


def sample_text(size: int) -> str:
    cluster = FakeCluster.synthetic(5000)
    pods = cluster.collection(cluster.resources[0])
    chunks: list[str] = []
    total = 0
    index = 0
    while total < size:
        chunk = yaml.safe_dump(pods.at(index % 5000)) + "".join(
            f"2025-01-01T00:00:{s:02d}Z GET /api/v1/items?page={s} 200 token_count={s}\n"
            for s in range(20)
        )
        chunks.append(chunk)
        total += len(chunk)
        index += 1
    return "".join(chunks)[:size]


def with_provider_tokens(text: str, every: int = 4096) -> str:
    """``text`` with a made-up provider token (GitHub, AWS, OpenAI in turn) on a log line
    of its own about every ``every`` characters: what the per-token regexes cost."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    makers = (
        lambda: (
            "cloning https://ghp_"
            + "".join(secrets.choice(alphabet) for _ in range(36))
            + "@github.com/shop/app"
        ),
        lambda: "uploading as AKIA" + "".join(secrets.choice(alphabet[:26]) for _ in range(16)),
        lambda: "export OPENAI_KEY sk-proj-" + secrets.token_urlsafe(120),
    )
    pieces = []
    for number, start in enumerate(range(0, len(text), every)):
        pieces += [text[start : start + every], f"\n{makers[number % 3]()}\n"]
    return "".join(pieces)


def best_of(runs: int, action: object) -> float:
    assert callable(action)
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    secret_count = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    values = known_values(secret_count)
    text = sample_text(MB)

    started = time.perf_counter()
    scrubber = SecretScrubber(values)
    learn_seconds = time.perf_counter() - started
    patterns_only = SecretScrubber()
    print(f"known values: {len(values)} ({secret_count} Secrets x 3 keys), searched-for "
          f"forms: {scrubber.known_forms}, learned in {learn_seconds * 1000:.0f} ms")  # fmt: skip

    for label, chosen in (("patterns only", patterns_only), ("patterns + known", scrubber)):
        seconds = best_of(3, lambda chosen=chosen: chosen.text(text))
        print(f"text, {label:17}: {seconds * 1000:7.1f} ms per MB of tool output")
    tokens = with_provider_tokens(text)
    seconds = best_of(3, lambda: patterns_only.text(tokens))
    print(f"text with a provider token per 4 KB, patterns only: {seconds * 1000:.1f} ms "
          f"per {len(tokens) / MB:.2f} MB")  # fmt: skip

    cluster = FakeCluster.synthetic(2000)
    pods = cluster.collection(cluster.resources[0])
    objects = [pods.at(i) for i in range(2000)]
    for label, chosen in (("patterns only", patterns_only), ("patterns + known", scrubber)):
        seconds = best_of(3, lambda chosen=chosen: [chosen.scrub_object(o) for o in objects])
        print(f"objects, {label:14}: {seconds / len(objects) * 1e6:7.1f} µs per pod")

    forms: set[str] = set()
    for value in values:
        plain, anchors = secret_forms(value)
        forms |= plain | anchors
    alternation = re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))
    sample = text[: MB // 100]
    seconds = best_of(1, lambda: alternation.sub("x", sample))
    print(f"for comparison, one regex alternation of the same forms: "
          f"{seconds * 100 * 1000:.0f} ms per MB (measured on 0.01 MB)")  # fmt: skip


if __name__ == "__main__":
    main()
