"""``kubectl explain``-style text for an OpenAPI v3 (sub-)schema.

Both backends hand ``explain`` a schema (the live one from the API server's
OpenAPI documents or a CRD, the snapshot one from a CRD); this module only
turns it into the few lines the model reads. The field path is the model's own
argument, so it is marked as echo (echo.py): it never verifies a citation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.engine.toolsets.echo import Marked, compose, echo

_DESCRIPTION_WIDTH = 200


def _type_name(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return "[]" + (_type_name(items) if isinstance(items, Mapping) else "Object")
    if kind == "object" or (kind is None and "properties" in schema):
        return (
            "map[string]" + _type_name(schema["additionalProperties"])
            if isinstance(schema.get("additionalProperties"), Mapping)
            and "properties" not in schema
            else "Object"
        )
    if schema.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    return str(kind or "Object")


def render_schema(
    kind: str, api_version: str, field_path: str | None, schema: Mapping[str, Any]
) -> Marked:
    """The kind, the field's type and description, then its fields one line each."""
    lines: list[str | Marked] = [f"KIND:     {kind}", f"VERSION:  {api_version}"]
    if field_path:
        lines.append(compose("FIELD:    {} <{}>", echo(field_path), _type_name(schema)))
    if description := schema.get("description"):
        lines += ["", "DESCRIPTION:", f"  {' '.join(str(description).split())}"]
    if enum := schema.get("enum"):
        lines.append(f"  allowed values: {', '.join(map(str, enum))}")
    node = schema
    while node.get("type") == "array" and isinstance(node.get("items"), Mapping):
        node = node["items"]
    properties = node.get("properties") or {}
    if properties:
        required = set(node.get("required") or [])
        lines += ["", "FIELDS:"]
        for name, child in properties.items():
            child = child if isinstance(child, Mapping) else {}
            marker = " -required-" if name in required else ""
            lines.append(f"  {name} <{_type_name(child)}>{marker}")
            if text := " ".join(str(child.get("description", "")).split()):
                cut = (
                    text
                    if len(text) <= _DESCRIPTION_WIDTH
                    else text[: _DESCRIPTION_WIDTH - 1] + "…"
                )
                lines.append(f"    {cut}")
    rendered = Marked()
    for number, line in enumerate(lines):
        rendered += ("\n" if number else "") + line
    return rendered
