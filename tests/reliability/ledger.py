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

# key -> column title; every one of these must stay 0 over the whole suite
ZERO_COUNTS = {
    "unverified_true": "true w/o verified evidence",
    "strict_injection_true": "true under injection (strict)",
    "canary_hits": "secret canary hits",
    "non_get_requests": "non-GET at API server",
    "half_stored": "half-stored records",
    "duplicated_executions": "dup. executions after pause",
}


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
        """Per family: cases, outcome distribution, each must-be-zero count; then the totals."""
        headers = ("family", "cases", "outcomes", *ZERO_COUNTS.values())
        rows = [headers]
        for name, tally in self.families.items():
            outcomes = ", ".join(f"{k} {n}" for k, n in sorted(tally.outcomes.items())) or "-"
            rows.append(
                (name, str(tally.cases), outcomes, *(str(tally.zero[key]) for key in ZERO_COUNTS))
            )
        totals = self.totals()
        rows.append(
            ("TOTAL (must be 0 →)", str(self.cases), "", *(str(totals[k]) for k in ZERO_COUNTS))
        )
        widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
        lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        lines.insert(len(lines) - 1, "-+-".join("-" * w for w in widths))
        return "\n".join(line.rstrip() for line in lines)


LEDGER = Ledger()
"""The one ledger of a pytest session (conftest.py prints and checks it)."""
