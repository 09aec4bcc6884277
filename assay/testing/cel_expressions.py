"""Every CEL expression a folder of policy files holds, for the front end's tests and bench.

Any ``expression`` or ``messageExpression`` string at any depth of any YAML document:
ValidatingAdmissionPolicies, Kyverno policies, Gatekeeper templates (their
``K8sNativeValidation`` code) and the like, without importing them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

KEYS = ("expression", "messageExpression")


def expressions_in(value: Any) -> Iterator[str]:
    """The expressions in one parsed YAML document, in order."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in KEYS and isinstance(item, str):
                yield item
            else:
                yield from expressions_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from expressions_in(item)


def read_expressions(folders: Iterable[Path]) -> list[str]:
    """The distinct expressions of every YAML file under ``folders``, in file order (files
    that do not read as YAML are passed over)."""
    found: dict[str, None] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.y*ml")):
            try:
                documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            except (yaml.YAMLError, UnicodeDecodeError, OSError):
                continue
            for document in documents:
                found.update(dict.fromkeys(expressions_in(document)))
    return list(found)
