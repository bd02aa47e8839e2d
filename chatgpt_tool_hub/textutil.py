"""Plain-text helpers shared by every layer (pure functions, no imports of the package)."""

from __future__ import annotations

import re

__all__ = ["strip_control"]

# ANSI/VT escape sequences (CSI, OSC, DCS/SOS/PM/APC strings, two-byte escapes), 8-bit CSI,
# every other C0/C1 control character except tab and newline, and bidi overrides.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -/]*[0-~]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)


def strip_control(text: str) -> str:
    """``text`` without colours, cursor moves, titles, bidi overrides and other control characters.

    ``\\r\\n`` becomes ``\\n`` and a lone ``\\r`` (progress bars) a newline, so
    the LLM gets plain text and a terminal that shows the text cannot be
    steered by it. Tabs and newlines stay.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)
