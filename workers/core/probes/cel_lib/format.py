"""Kubernetes' format library (1.31+) is not provided.

Its ``format.<name>().validate(s)`` returns an ``optional<list<string>>``, and the runtime's
Python functions cannot return optional values; an expression that uses it does not compile,
so the probe is dropped with that reason (docs/probes.md, known differences).
"""

from __future__ import annotations

from workers.core.probes.cel_lib.base import Overload

OVERLOADS: list[Overload] = []
