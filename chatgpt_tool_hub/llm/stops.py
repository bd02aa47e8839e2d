"""Stop sequences applied on the client: to whole texts and to streams."""

from __future__ import annotations

from typing import Sequence

__all__ = ["clean_stop", "cut_at_stop", "StopCutter"]


def clean_stop(stop: Sequence[str] | str | None) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    out: list[str] = []
    for s in stop:
        if s and s not in out:
            out.append(str(s))
    return out


def cut_at_stop(text: str, stop: Sequence[str] | str | None) -> tuple[str, bool]:
    """``text`` cut before the earliest stop string; and whether a cut happened."""
    cut = len(text)
    for s in clean_stop(stop):
        i = text.find(s)
        if i != -1 and i < cut:
            cut = i
    return text[:cut], cut < len(text)


class StopCutter:
    """Applies stop strings to a stream of text pieces.

    ``feed(piece)`` returns the text that is safe to emit now: it holds back
    only a tail that could be the start of a stop string (``"\nObs"`` while
    ``"\nObservation:"`` is a stop), so ordinary text streams without delay;
    ``stopped`` turns True once a stop string was seen; ``flush()`` returns
    what is held back at the end.
    """

    def __init__(self, stop: Sequence[str] | str | None) -> None:
        self.stop = clean_stop(stop)
        self._buffer = ""
        self.stopped = False
        self._window = max((len(s) for s in self.stop), default=1) - 1  # the longest tail that may be held
        self._firsts = frozenset(s[0] for s in self.stop)

    def feed(self, piece: str) -> str:
        if self.stopped or not piece:
            return ""
        if not self.stop:
            return piece
        buffer = self._buffer + piece if self._buffer else piece
        cut = -1
        for s in self.stop:
            i = buffer.find(s)
            if i != -1 and (cut == -1 or i < cut):
                cut = i
        if cut != -1:
            self.stopped = True
            self._buffer = ""
            return buffer[:cut]
        keep = self._held(buffer)
        if keep:
            self._buffer = buffer[-keep:]
            return buffer[:-keep]
        self._buffer = ""
        return buffer

    def _held(self, buffer: str) -> int:
        """The length of the longest end of ``buffer`` that is the start of a stop string (not all of it)."""
        tail = buffer[-self._window:] if self._window else ""
        for i, char in enumerate(tail):
            if char in self._firsts:
                end = tail[i:]
                if any(len(s) > len(end) and s.startswith(end) for s in self.stop):
                    return len(end)
        return 0

    def flush(self) -> str:
        out, self._buffer = ("" if self.stopped else self._buffer), ""
        return out
