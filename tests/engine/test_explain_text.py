"""``explain`` text: a schema rendered the way kubectl explain prints it."""

from __future__ import annotations

from workers.engine.toolsets.explain_text import render_schema


def test_render_schema_reads_like_kubectl_explain() -> None:
    schema = {
        "type": "object",
        "description": "Spec   of the\nthing.",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "description": "The name."},
            "hosts": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "port": {"x-kubernetes-int-or-string": True},
        },
    }
    text = render_schema("Thing", "example.com/v1", "spec", schema).text
    assert text.splitlines()[:3] == [
        "KIND:     Thing",
        "VERSION:  example.com/v1",
        "FIELD:    spec <Object>",
    ]
    assert "  Spec of the thing." in text
    assert "  name <string> -required-" in text
    assert "  hosts <[]string>" in text
    assert "  labels <map[string]string>" in text
    assert "  port <int-or-string>" in text
