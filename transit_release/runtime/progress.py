"""Progress of long steps, shown on a terminal and silent otherwise.

Flows and tasks announce stages (``with progress.stage("sanitizing 28 partitions", total=28) as bar:
... bar.advance()``); what is shown depends on the reporter the command installs: a `rich` progress
display when standard error is a terminal, nothing otherwise (and in tests, and under a scheduler).
Only stage names and counts of work items are shown, never data.
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class _Silent:
    def advance(self, n: int = 1) -> None:
        pass


class Reporter:
    """Silent by default; :class:`RichReporter` draws on a terminal."""

    @contextmanager
    def stage(self, name: str, total: int | None = None):
        yield _Silent()

    def open_stage(self, name: str) -> None:
        """A stage that lasts until the next one starts (or :meth:`close_stage`)."""

    def close_stage(self) -> None:
        """End the stage :meth:`open_stage` began, if it is still open."""


class RichReporter(Reporter):
    def __init__(self, console=None):
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self._open = None

    def open_stage(self, name: str) -> None:
        self.close_stage()
        stage = self.stage(name)
        stage.__enter__()
        self._open = stage

    def close_stage(self) -> None:
        stage, self._open = self._open, None
        if stage is not None:
            stage.__exit__(None, None, None)

    @contextmanager
    def stage(self, name: str, total: int | None = None):
        self.close_stage()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = [SpinnerColumn(), TextColumn("{task.description}")]
        if total:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns.append(TimeElapsedColumn())
        start = time.monotonic()
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task(name, total=total)

            class _Bar:
                def advance(self, n: int = 1) -> None:
                    bar.advance(task, n)

            yield _Bar()
        self.console.print(f"[green]✓[/green] {name} ({time.monotonic() - start:.1f} s)")


_reporter: Reporter = Reporter()


def install(reporter: Reporter) -> None:
    global _reporter
    _reporter = reporter


def current() -> Reporter:
    """The reporter installed (silent unless a command installed one)."""
    return _reporter


def stage(name: str, total: int | None = None):
    return _reporter.stage(name, total)


def open_stage(name: str) -> None:
    """A stage shown until the next one starts (work whose end another module marks, e.g. a flow run's start)."""
    _reporter.open_stage(name)


def close_stage() -> None:
    _reporter.close_stage()
