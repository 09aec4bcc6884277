"""``worker_cpu_affinity``'s values: ``adaptive``, ``off``, ``auto``, or CPUs like ``0-3,8``.

Here, with the settings, so a bad value is refused when the settings load (at
start-up, naming the value), not when a worker first uses it. What the values
do is in workers/fleet/cpu_affinity.py.
"""

from __future__ import annotations

OFF = "off"
AUTO = "auto"
ADAPTIVE = "adaptive"
MAX_CPU = 8191  # Linux's largest CPU count (CONFIG_NR_CPUS) is 8192


class AffinityError(ValueError):
    """A ``worker_cpu_affinity`` that cannot be honoured; the message says what to change."""


def parse_cpu_list(text: str) -> list[int]:
    """CPUs in Linux's list syntax (``0-3,8``), in the order written, without repeats."""
    cpus: list[int] = []
    seen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise AffinityError(
                f"worker_cpu_affinity {text!r}: {part!r} is not a CPU number or a range "
                "like 0-3; use adaptive, off, auto, or a list such as 0-3,8"
            )
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise AffinityError(f"worker_cpu_affinity {text!r}: the range {part!r} runs backwards")
        if high > MAX_CPU:
            raise AffinityError(f"worker_cpu_affinity {text!r}: no machine has CPU {high}")
        for cpu in range(low, high + 1):
            if cpu not in seen:
                seen.add(cpu)
                cpus.append(cpu)
    return cpus


def normalized(value: str) -> str:
    """The setting as stored: a name, or a list checked by :func:`parse_cpu_list`."""
    text = value.strip().lower()
    if text in (OFF, AUTO, ADAPTIVE):
        return text
    parse_cpu_list(text)
    return text
