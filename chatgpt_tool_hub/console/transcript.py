"""What the LLM-OS terminal keeps of a session: its turns, ``/save`` (Markdown or JSON) and ``/copy``.

The transcript is the terminal's own record of everything said in the
session, so ``/save`` writes all of it, also turns that no longer fit the
app's memory budget. ``/copy`` hands text to the operating system's clipboard
tool (``pbcopy``, ``wl-copy``, ``xclip``, ``xsel``, ``clip``): no Python
package is needed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import UserError

__all__ = ["Turn", "Transcript", "CLIPBOARD_COMMANDS", "copy_to_clipboard"]

# tried in this order; the first one found on PATH that succeeds wins
CLIPBOARD_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("pbcopy",),                             # macOS
    ("wl-copy",),                            # Wayland
    ("xclip", "-selection", "clipboard"),    # X11
    ("xsel", "--clipboard", "--input"),      # X11
    ("clip.exe",),                           # WSL
    ("clip",),                               # Windows
)
CLIPBOARD_TIMEOUT_S = 10


@dataclass
class Turn:
    """One exchange: a question and its answer, or a file handed over (``kind="file"``, ``answer`` empty).

    ``files`` are the workspace files that came with it: the recording of a
    voice question, the spoken answer."""

    kind: str  # "question", "voice" or "file"
    text: str
    answer: str = ""
    files: list[str] = field(default_factory=list)

    def messages(self) -> list[dict[str, str]]:
        if self.kind == "file":
            return [{"role": "user", "content": f"(handed over {self.text})"}]
        return [{"role": "user", "content": self.text}, {"role": "assistant", "content": self.answer}]


class Transcript:
    """The session's turns, in order."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    def add(self, turn: Turn) -> Turn:
        self.turns.append(turn)
        return turn

    def pop(self) -> Turn | None:
        return self.turns.pop() if self.turns else None

    def clear(self) -> None:
        self.turns.clear()

    def last_answer(self) -> str | None:
        for turn in reversed(self.turns):
            if turn.answer:
                return turn.answer
        return None

    def __len__(self) -> int:
        return len(self.turns)

    # ---- saving -------------------------------------------------------------------------------------

    def markdown(self, model: str = "") -> str:
        lines = ["# tool-hub conversation", ""]
        lines += [f"_{time.strftime('%Y-%m-%d %H:%M')}" + (f", model {model}_" if model else "_"), ""]
        for turn in self.turns:
            if turn.kind == "file":
                lines += ["## you", "", f"(handed over `{turn.text}`)", ""]
                continue
            heading = "## you"
            if turn.kind == "voice":
                heading = f"## you (voice, `{turn.files[0]}`)" if turn.files else "## you (voice)"
            lines += [heading, "", turn.text, "", "## AI", "", turn.answer, ""]
            if turn.kind == "voice" and len(turn.files) > 1:
                lines += ["(spoken into " + ", ".join(f"`{name}`" for name in turn.files[1:]) + ")", ""]
        return "\n".join(lines)

    def json(self) -> str:
        """The turns as a JSON list of ``{"role", "content"}`` messages: what ``chat_history`` takes."""
        messages = [m for turn in self.turns for m in turn.messages()]
        return json.dumps(messages, ensure_ascii=False, indent=2) + "\n"

    def save(self, target: str | None, model: str = "") -> tuple[Path, str]:
        """Write the transcript to ``target`` (``.json``: JSON messages, anything else: Markdown; no name: a new
        ``conversation-YYYYmmdd-HHMMSS.md`` in the current folder). Returns the path and the format's name."""
        name = (target or "").strip().strip("'\"") or time.strftime("conversation-%Y%m%d-%H%M%S.md")
        path = Path(name).expanduser()
        as_json = path.suffix.lower() == ".json"
        text = self.json() if as_json else self.markdown(model)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or type(exc).__name__}") from None
        return path.resolve(), ("JSON (a list of role/content messages, as chat_history takes)" if as_json
                                else "Markdown")


# ---- the clipboard ----------------------------------------------------------------------------------


def copy_to_clipboard(text: str, commands: Sequence[Sequence[str]] = CLIPBOARD_COMMANDS) -> str:
    """Copy ``text`` with the first clipboard tool on PATH that works; its name, or ``UserError``."""
    tried: list[str] = []
    for command in commands:
        found = shutil.which(command[0])
        if found is None:
            continue
        tried.append(command[0])
        try:
            # no pipes left open: xclip and wl-copy stay in the background to serve the selection
            done = subprocess.run([found, *command[1:]], input=text.encode("utf-8"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=CLIPBOARD_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return command[0]
    names = ", ".join(c[0] for c in commands)
    if tried:
        raise UserError(f"the clipboard tools found ({', '.join(tried)}) failed (no display to copy to?); "
                        f"/save FILE writes the conversation to a file instead")
    raise UserError(f"no clipboard tool found on PATH (one of {names}); install one, e.g. apt install xclip "
                    f"or wl-clipboard, or use /save FILE")
