"""How many tokens the model reads: compacted tool output versus the raw objects.

For each example snapshot, compares

* ``get`` of every kind present (the table) with that kind's objects as raw JSON, and
* ``describe`` of every object with the object plus its events as raw JSON,

counting tokens with litellm's offline tokenizer (tiktoken's bundled
encoding). Target: compacted <= 35% of raw. Also prints the recorded figure of
the older, unsafe compaction, so the cost of keeping meaning stays visible.
Prints figures; asserts nothing.

    .venv/bin/python bench/bench_compaction.py [SNAPSHOT_DIR ...]
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from schemas.settings import load_settings  # noqa: E402
from workers.engine.toolsets.base import ToolRegistry  # noqa: E402
from workers.engine.toolsets.kubernetes import kubernetes_tools  # noqa: E402
from workers.engine.toolsets.snapshot_backend import SnapshotBackend  # noqa: E402

TARGET_RATIO = 0.35
# The same measurement with the compaction before issue 14 (commit d8becec), which also
# dropped every empty block and anything named like noise. It cannot be re-run (that rule
# is gone), so it is recorded here: the difference is what keeping the meaning costs.
BEFORE_SAFE_RULE = ("d8becec", 0.241)
TOKEN_MODEL = "gpt-4o"


def token_counter() -> tuple[Callable[[str], int], str]:
    """litellm's counter when it works offline, else chars/4 (and say so)."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    try:
        import litellm

        litellm.token_counter(model=TOKEN_MODEL, text="probe")
    except Exception as exc:  # no tokenizer available offline
        return (lambda text: len(text) // 4), f"chars/4 (litellm tokenizer unavailable: {exc})"
    return (
        lambda text: litellm.token_counter(model=TOKEN_MODEL, text=text),
        f"litellm.token_counter(model={TOKEN_MODEL!r})",
    )


def raw(objects: Any) -> str:
    return json.dumps(objects, separators=(",", ":"))


def measure(path: Path, count: Callable[[str], int]) -> dict[str, int]:
    backend = SnapshotBackend(path)
    registry = ToolRegistry(kubernetes_tools(backend, load_settings()))
    totals = {"get_raw": 0, "get_compact": 0, "describe_raw": 0, "describe_compact": 0, "calls": 0}
    for info in backend.present_resources():
        objects = list(backend.list_objects(info, None))
        totals["get_raw"] += count(raw(objects))
        totals["get_compact"] += count(registry.call("get", {"kind": info.plural}).output)
        totals["calls"] += 1
        for obj in objects:
            meta = obj["metadata"]
            namespace = meta.get("namespace")
            events = backend.events(namespace, info.kind, meta["name"]) if namespace else []
            totals["describe_raw"] += count(raw(obj) + (raw(events) if events else ""))
            arguments = {"kind": info.kind, "name": meta["name"], "namespace": namespace}
            totals["describe_compact"] += count(registry.call("describe", arguments).output)
            totals["calls"] += 1
    return totals


def main(paths: list[Path]) -> None:
    count, how = token_counter()
    print(f"token counter: {how}")
    print(f"target: compacted <= {TARGET_RATIO:.0%} of raw\n")
    header = f"{'snapshot':<12} {'part':<9} {'raw tok':>9} {'compact tok':>12} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    grand_raw = grand_compact = 0
    started = time.perf_counter()
    calls = 0
    for path in paths:
        totals = measure(path, count)
        calls += totals["calls"]
        for part in ("get", "describe"):
            raw_tokens, compact_tokens = totals[f"{part}_raw"], totals[f"{part}_compact"]
            print(
                f"{path.name:<12} {part:<9} {raw_tokens:>9} {compact_tokens:>12} "
                f"{compact_tokens / raw_tokens:>7.1%}"
            )
            grand_raw += raw_tokens
            grand_compact += compact_tokens
    elapsed = time.perf_counter() - started
    ratio = grand_compact / grand_raw
    print("-" * len(header))
    print(f"{'all':<12} {'':<9} {grand_raw:>9} {grand_compact:>12} {ratio:>7.1%}")
    verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
    print(f"\ncompacted output is {ratio:.1%} of raw: {verdict} the {TARGET_RATIO:.0%} target")
    commit, before = BEFORE_SAFE_RULE
    print(
        f"before the meaning-preserving rule (commit {commit}, example snapshots): {before:.1%}; "
        f"keeping every value the drop rules do not name costs {(ratio - before) * 100:+.1f} points"
    )
    print(f"{calls} tool calls measured in {elapsed:.2f} s (including token counting)")


if __name__ == "__main__":
    default = sorted(p for p in (ROOT / "examples" / "snapshots").iterdir() if p.is_dir())
    main([Path(a) for a in sys.argv[1:]] or default)
