"""A spinner on stderr counting what a long command has done (shown on a terminal only)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextmanager
def counting(what: str) -> Iterator[Callable[[int], None]]:
    """A callback adding to the count of `what` shown beside the spinner."""
    console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(
        *columns, console=console, transient=True, disable=not console.is_terminal
    ) as bar:
        task = bar.add_task(f"{what}: 0", total=None)
        done = 0

        def add(count: int) -> None:
            nonlocal done
            done += count
            bar.update(task, description=f"{what}: {done}")

        yield add
