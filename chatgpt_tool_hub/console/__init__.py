"""The terminal view, shared by ``tool-hub`` and its demo: event panels, the approval prompt, the tool tables.

``console.terminal`` is the LLM-OS terminal's session (its ``/`` commands),
``console.transcript`` what it saves and copies.

Everything shown comes from a model or a tool, so nothing is printed as it
came: rich markup is escaped, and the approval prompt shows the input with
every control, bidi and zero-width character made visible, its length and
line count, and long runs of empty lines and very long inputs cut with a
marker that says how much is not shown.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any, Callable, Iterable, Sequence

__all__ = ["EventView", "make_console", "console_approver", "print_tools", "print_session_tools", "show_input",
           "shorten", "SHOWN_MAX_CHARS", "DESCRIPTION_MAX_CHARS"]

SHOWN_MAX_CHARS = 4000  # an input longer than this is shown as head and tail
DESCRIPTION_MAX_CHARS = 200  # tool tables cut longer descriptions after a word, with an ellipsis
_EMPTY_RUN = 3  # more consecutive empty lines than this are shown as one marker line


def make_console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


class EventView:
    """Renders engine events as panels; streams tokens in a transient live area."""

    def __init__(self, console, *, verbose: bool = True):
        self.console = console
        self.verbose = verbose
        self._live: Any = None  # a rich Live while tokens stream
        self._buffer = ""

    def __call__(self, event) -> None:
        kind = event.kind
        if kind == "token":
            if self.verbose:
                self._token(event.text)
            return
        self._stop_live()
        if kind == "answer":
            self._answer(event)
        elif self.verbose:
            self._panel(event)

    def close(self) -> None:
        self._stop_live()

    def _token(self, text: str) -> None:
        from rich.live import Live
        from rich.text import Text

        self._buffer += text
        if self._live is None:
            self._live = Live(Text(self._buffer, style="dim"), console=self.console, transient=True,
                              refresh_per_second=12)
            self._live.start()
        else:
            self._live.update(Text(self._buffer[-2000:], style="dim"))

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._buffer = ""

    def _panel(self, event) -> None:
        from rich.panel import Panel
        from rich.text import Text

        indent = "  " * event.depth
        if event.kind == "thought":
            body, title, style = Text(event.text), "Thought", "cyan"
        elif event.kind == "action":
            shown = event.tool_input if isinstance(event.tool_input, str) else json.dumps(
                event.tool_input, ensure_ascii=False, indent=2)
            body, title, style = Text(f"{event.tool}\n{shown}"), "Action", "yellow"
        elif event.kind == "observation":
            text = event.observation if len(event.observation) < 3000 else event.observation[:3000] + "\n..."
            body, title, style = Text(text), f"Observation ({event.tool})", "green"
        elif event.kind == "error":
            body, title, style = Text(event.message), "Format problem, asking the model again", "red"
        else:
            return
        self.console.print(Panel(body, title=f"{indent}{title}", title_align="left", border_style=style))

    def _answer(self, event) -> None:
        from rich.markdown import Markdown
        from rich.panel import Panel

        if self.verbose:
            note = "" if event.stopped_by == "answer" else f" (stopped by {event.stopped_by.replace('_', ' ')})"
            self.console.print(Panel(Markdown(event.text), title=f"AI{note}", title_align="left",
                                     border_style="bold magenta"))
        else:
            # the answer exactly as the model wrote it: never hard-wrapped at the console width
            self.console.print(event.text, markup=False, highlight=False, soft_wrap=True)




# ---- the approval prompt -------------------------------------------------------------------


def _visible(ch: str) -> str:
    """A character as the approver sees it: tabs, control, format (bidi, zero-width) and separator
    characters as escapes, everything else as itself."""
    if ch == "\n":
        return ch
    if ch == "\t":
        return "\\t"
    category = unicodedata.category(ch)
    if category in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn") or (category == "Zs" and ch != " "):
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return ch


def show_input(value: Any, max_chars: int = SHOWN_MAX_CHARS) -> tuple[str, str]:
    """``(summary, text)`` of a tool input for the approval prompt: ``"123 characters, 4 lines"`` and the
    input with invisible characters escaped, long empty runs and long inputs cut with a marker."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, default=str)
    lines = text.split("\n")
    summary = f"{len(text)} character{'s' if len(text) != 1 else ''}, {len(lines)} line{'s' if len(lines) != 1 else ''}"
    shown: list[str] = []
    empty = 0
    for line in lines:
        if line.strip() == "":
            empty += 1
            continue
        shown.extend(_empty_run(empty))
        empty = 0
        shown.append("".join(_visible(ch) for ch in line))
    shown.extend(_empty_run(empty))
    body = "\n".join(shown)
    if len(body) > max_chars:
        head, tail = body[: max_chars * 3 // 4], body[-(max_chars // 4):]
        body = f"{head}\n[... {len(body) - len(head) - len(tail)} characters not shown ...]\n{tail}"
    return summary, body


def _empty_run(count: int) -> list[str]:
    if count <= _EMPTY_RUN:
        return [""] * count
    return [f"[... {count} empty lines ...]"]


def console_approver(console) -> Callable[[str, Any], bool]:
    """An approver that shows what a dangerous tool will run and asks ``Allow? [y/n]``."""

    def approve(tool_name: str, tool_input: Any) -> bool:
        from rich.markup import escape
        from rich.prompt import Confirm

        summary, shown = show_input(tool_input)
        console.print(f"[bold red]{escape(_visible_name(tool_name))}[/] wants to run with this input "
                      f"({summary}; invisible characters are shown as escapes):", markup=True, highlight=False)
        # markup off: what is approved is shown exactly ("ls [abc]*" is not rich markup)
        console.print(shown, markup=False, highlight=False, soft_wrap=True)
        try:
            return Confirm.ask("Allow?", console=console, default=False)
        except EOFError:  # stdin is closed or a pipe that ran dry: nobody can say yes
            console.print("(no answer on stdin: not allowed)", markup=False, highlight=False)
            return False

    return approve


def _visible_name(name: Any) -> str:
    return "".join(_visible(ch) for ch in str(name)).replace("\n", "\\n")


# ---- the tool tables ------------------------------------------------------------------------------


def shorten(text: str | None, max_chars: int = DESCRIPTION_MAX_CHARS) -> str:
    """``text`` on one line, cut after the last whole word that fits, with ``…``."""
    flat = " ".join((text or "").split())
    if len(flat) <= max_chars:
        return flat
    cut = flat[: max_chars].rsplit(" ", 1)[0] if " " in flat[: max_chars] else flat[: max_chars]
    return cut.rstrip(" ,;:.") + "…"


def print_tools(console, rows: Iterable[Sequence[Any]]) -> None:
    """The registered tools: ``(name, description, keys it needs, default)`` rows."""
    from rich.table import Table

    table = Table(title="tools")
    table.add_column("name", style="bold")
    table.add_column("description")
    table.add_column("keys it needs")
    table.add_column("default")
    for row in rows:
        name, description, keys = row[0], row[1], row[2]
        default = "yes" if len(row) > 3 and row[3] else ""
        table.add_row(name, shorten(description), ", ".join(keys) or "-", default)
    console.print(table)


def print_session_tools(console, tools: Iterable[Any]) -> None:
    """The tools of one session: name, description, and whether each asks before it runs."""
    from rich.table import Table

    table = Table(title="tools of this session")
    table.add_column("name", style="bold")
    table.add_column("description")
    table.add_column("asks first")
    for tool in tools:
        table.add_row(str(tool.name), shorten(getattr(tool, "description", "")),
                      "yes" if getattr(tool, "dangerous", False) else "")
    console.print(table)
