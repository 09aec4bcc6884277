"""The reliability suite's tally: cases and outcomes per family, and the counts that must be 0.

Every test of ``tests/reliability`` records each case it ran here (one
:meth:`Ledger.case` call per run, request or command) with its outcome (a
verdict, an exit code, an HTTP status class) and any must-be-zero event it
observed. ``conftest.py`` prints :meth:`Ledger.table` at the end of the session
and fails the session when :meth:`Ledger.violations` is not empty, so a
regression shows even if the test that saw it forgot to assert.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

FAMILIES = (
    "model faults",
    "hostile cluster content",
    "echoed arguments",
    "secrets",
    "write path",
    "shell injection",
    "API abuse",
    "infrastructure faults",
    "bad input",
)

# key -> what it counts; every one of these must stay 0 over the whole suite
ZERO_COUNTS = {
    "unverified_true": "true w/o verified evidence",
    "strict_injection_true": "true under injection (strict)",
    "strict_unproven_true": "strict true w/o structured field + confirmation",
    "verdict_past_budget": "verdict from a reply past the token budget",
    "hostile_id_accepted": "hostile id not refused as invalid",
    "abuse_accepted": "abusive API request accepted (2xx)",
    "canary_hits": "secret canary hits",
    "non_get_requests": "non-GET at API server",
    "half_stored": "half-stored records",
    "duplicated_executions": "dup. executions after pause",
}
WIDTH = 100  # the summary fits a terminal of this many columns


@dataclass
class FamilyTally:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    zero: Counter[str] = field(default_factory=Counter)


@dataclass
class Ledger:
    families: dict[str, FamilyTally] = field(
        default_factory=lambda: {name: FamilyTally() for name in FAMILIES}
    )
    notes: list[str] = field(default_factory=list)

    def note(self, title: str, text: str) -> None:
        """A block printed under the table (a family's own breakdown, e.g. per profile)."""
        self.notes.append(f"{title}\n{text}")

    def case(self, family: str, outcome: str, **zero_counts: int) -> None:
        """Record one case of ``family`` ending in ``outcome`` with what it observed."""
        if family not in self.families:
            raise KeyError(f"unknown family {family!r}; one of {FAMILIES}")
        unknown = set(zero_counts) - ZERO_COUNTS.keys()
        if unknown:
            raise KeyError(f"unknown counts {sorted(unknown)}; one of {sorted(ZERO_COUNTS)}")
        tally = self.families[family]
        tally.cases += 1
        tally.outcomes[outcome] += 1
        tally.zero.update({key: value for key, value in zero_counts.items() if value})

    def observe(self, family: str, **zero_counts: int) -> None:
        """Add must-be-zero observations not tied to one more case (a whole scenario's)."""
        self.families[family].zero.update({k: v for k, v in zero_counts.items() if v})

    def totals(self) -> Counter[str]:
        total: Counter[str] = Counter({key: 0 for key in ZERO_COUNTS})
        for tally in self.families.values():
            total.update(tally.zero)
        return total

    def violations(self) -> dict[str, int]:
        return {ZERO_COUNTS[key]: n for key, n in self.totals().items() if n}

    @property
    def cases(self) -> int:
        return sum(tally.cases for tally in self.families.values())

    def table(self) -> str:
        """Two blocks within :data:`WIDTH` columns: per family its cases and outcomes (wrapped);
        then each must-be-zero count, its total and the families that saw it."""
        name_width = max(len(name) for name in (*self.families, "family", "TOTAL"))
        head = f"{'family':<{name_width}}  {'cases':>5}  "
        lines = [head + "outcomes", "-" * WIDTH]
        for name, tally in self.families.items():
            outcomes = [f"{k} {n}" for k, n in sorted(tally.outcomes.items())]
            lines += _wrapped(f"{name:<{name_width}}  {tally.cases:>5}  ", outcomes)
        lines += ["-" * WIDTH, f"{'TOTAL':<{name_width}}  {self.cases:>5}", ""]
        count_width = max(len(title) for title in ZERO_COUNTS.values())
        lines += [f"{'must be 0':<{count_width}}  {'count':>5}  seen in", "-" * WIDTH]
        totals = self.totals()
        for key, title in ZERO_COUNTS.items():
            seen = [f"{name} {t.zero[key]}" for name, t in self.families.items() if t.zero[key]]
            lines += _wrapped(f"{title:<{count_width}}  {totals[key]:>5}  ", seen)
        return "\n".join(line.rstrip() for line in lines)


def _wrapped(head: str, items: list[str]) -> list[str]:
    """``head`` then ``items`` joined by ", ", wrapped at :data:`WIDTH` between items, with
    continuation lines aligned under the first item (an item is never split)."""
    lines, line = [], head
    for number, item in enumerate(items or ["-"]):
        piece = item + ("," if number < len(items) - 1 else "")
        if line != head and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line)
            line = " " * len(head)
        line += ("" if line.endswith(" ") else " ") + piece
    return [*lines, line]


LEDGER = Ledger()
"""The one ledger of a pytest session (conftest.py prints and checks it)."""
