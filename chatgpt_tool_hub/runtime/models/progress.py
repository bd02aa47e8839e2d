"""A loading spinner (model name + elapsed time) on stderr, only when stderr is a terminal.

Downloads are shown by huggingface_hub's own tqdm bars, which stay enabled:
``loading`` is used around loads from disk or cache; a download runs without
the spinner so the bars are not overdrawn (see ``runtime.models.loading``).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

__all__ = ["loading", "stderr_is_tty"]


def stderr_is_tty() -> bool:
    try:
        return bool(sys.stderr and sys.stderr.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


@contextlib.contextmanager
def loading(label: str) -> Iterator[None]:
    """Show ``⠋ loading <label> 0:00:03`` while the block runs (a no-op without a TTY)."""
    if not stderr_is_tty():
        yield
        return
    try:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    except ImportError:  # rich is a dependency, but never fail a load for a spinner
        yield
        return
    progress = Progress(SpinnerColumn(), TextColumn("loading {task.description}"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True,
                        redirect_stdout=False, redirect_stderr=False)
    with progress:
        progress.add_task(label, total=None)
        yield
