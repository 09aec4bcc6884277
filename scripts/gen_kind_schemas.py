"""Write workers/policy_engine/probes/kind_schemas.json.gz: the built-in kinds' OpenAPI schemas.

Export type-checks a policy's field paths against the schema of each kind it judges, as the
API server does (workers/policy_engine/probes/kind_schemas.py). A live cluster serves its own
schemas (/openapi/v3); offline, these are the Kubernetes API's own, for the version stated
below, taken from the JSON schemas the ``kubernetes-validate`` package (a test dependency)
carries, stripped to what a type check reads: types, properties, items, map values and
references (about 20 KB compressed).

    .venv/bin/python scripts/gen_kind_schemas.py          # write
    .venv/bin/python scripts/gen_kind_schemas.py --check  # exit 1 when the file differs
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

KUBERNETES_VERSION = "1.34"
OUT = Path(__file__).resolve().parent.parent / "workers/policy_engine/probes/kind_schemas.json.gz"
KEEP = frozenset(
    {"type", "properties", "items", "additionalProperties", "$ref", "oneOf", "format",
     "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string"}
)  # fmt: skip
REF_PREFIXES = ("/api/_definitions.json#/$defs/", "#/$defs/")


def _compact(node: Any) -> Any:
    if isinstance(node, list):
        return [_compact(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in KEEP:
            continue
        if key == "$ref":
            ref = str(value)
            for prefix in REF_PREFIXES:
                ref = ref.removeprefix(prefix)
            out[key] = ref
        elif key == "properties":
            out[key] = {name: _compact(sub) for name, sub in value.items()}
        else:
            out[key] = _compact(value)
    return out


def render() -> bytes:
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    definitions = json.loads((base / f"v{KUBERNETES_VERSION}.0-local" / "_definitions.json")
                             .read_text())["$defs"]  # fmt: skip
    kinds: dict[str, str] = {}
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            group, version, kind = gvk.get("group", ""), gvk["version"], gvk["kind"]
            api_version = f"{group}/{version}" if group else version
            kinds.setdefault(f"{api_version}/{kind}", name)
    document = {
        "kubernetes": KUBERNETES_VERSION,
        "kinds": dict(sorted(kinds.items())),
        "definitions": {name: _compact(schema) for name, schema in sorted(definitions.items())},
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return gzip.compress(text, mtime=0)


def main(argv: list[str]) -> int:
    data = render()
    if "--check" in argv:
        current = OUT.read_bytes() if OUT.exists() else b""
        if gzip.decompress(current) != gzip.decompress(data) if current else True:
            print(f"{OUT} is stale: run scripts/gen_kind_schemas.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
