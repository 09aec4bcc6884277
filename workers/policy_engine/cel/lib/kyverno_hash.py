"""Kyverno's ``hash`` library: hex digests of a string, for a Kyverno ValidatingPolicy.

``sha1(s)``, ``sha256(s)`` and ``md5(s)`` (and, from Kyverno 1.18, the same as
``hash.sha1(s)``, ``hash.sha256(s)``, ``hash.md5(s)``) give the lower-case hex digest of the
string's UTF-8 bytes. They answer only while an imported Kyverno ValidatingPolicy is run
(kyverno_resource.py binds that); anywhere else a call is an evaluation error. Each call is
charged by the string's length, as any call that reads its argument once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from workers.policy_engine.cel.lib.base import Overload
from workers.policy_engine.cel.lib.kyverno_resource import require_kyverno_policy


def _digest(name: str) -> Callable[[str], str]:
    def digest(value: str) -> str:
        require_kyverno_policy(f"hash.{name}")
        return hashlib.new(name, value.encode("utf-8", "surrogatepass")).hexdigest()

    return digest


_ALGORITHMS = ("sha1", "sha256", "md5")

OVERLOADS = [
    *(Overload(name, f"kyverno_{name}_string", ("string",), "string", _digest(name))
      for name in _ALGORITHMS),
    *(Overload(f"hash.{name}", f"kyverno_hash_{name}_string", ("string",), "string",
               _digest(name)) for name in _ALGORITHMS),
]  # fmt: skip
