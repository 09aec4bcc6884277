"""Progress of a run on stderr: rich bars on a terminal, plain lines otherwise.

A CI log or a pipe gets one line per arm each time another tenth of its
attempts is done, instead of a redrawn bar full of escape codes.
"""

from __future__ import annotations

import threading
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from schemas.eval import ARM_TITLES, Attempt


class EvalProgress:
    def __init__(self, totals: dict[str, int], console: Console) -> None:
        self.totals = {arm: total for arm, total in totals.items() if total}
        self.console = console
        self.done = dict.fromkeys(self.totals, 0)
        self.wrong = dict.fromkeys(self.totals, 0)
        self._lock = threading.Lock()
        self._bars: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._printed = dict.fromkeys(self.totals, 0)

    def __enter__(self) -> EvalProgress:
        if self.console.is_terminal:
            self._bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[wrong]} wrong"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._bars.start()
            for arm, total in self.totals.items():
                title = ARM_TITLES.get(arm, arm)
                self._tasks[arm] = self._bars.add_task(title, total=total, wrong=0)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bars is not None:
            self._bars.stop()

    def advance(self, attempt: Attempt) -> None:
        with self._lock:
            arm = attempt.arm
            if arm not in self.totals:
                return
            self.done[arm] += 1
            self.wrong[arm] += not attempt.correct
            if self._bars is not None:
                self._bars.update(self._tasks[arm], advance=1, wrong=self.wrong[arm])
                return
            total = self.totals[arm]
            tenth = self.done[arm] * 10 // total
            if tenth > self._printed[arm] or self.done[arm] == total:
                self._printed[arm] = tenth
                self.console.print(
                    f"[{arm}] {self.done[arm]}/{total} done, {self.wrong[arm]} wrong",
                    markup=False,
                    highlight=False,
                )
