"""The store's Lua scripts, kept as ``.lua`` files beside the modules that run them.

A script there names every key it touches in ``KEYS`` and takes the time from its caller in
``ARGV``, so it can be read, linted and tested as Lua, and a reader sees the whole step in one
file. Each is read once per process, by name, and registered by the module that owns its keys.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_FOLDER = Path(__file__).parent


@cache
def lua_source(name: str) -> str:
    """The text of ``{name}.lua`` beside this module."""
    return (_FOLDER / f"{name}.lua").read_text(encoding="utf-8")
