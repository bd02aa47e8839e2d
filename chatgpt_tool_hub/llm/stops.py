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

    def feed(self, piece: str) -> str:
        if self.stopped or not piece:
            return ""
        if not self.stop:
            return piece
        self._buffer += piece
        text, hit = cut_at_stop(self._buffer, self.stop)
        if hit:
            self.stopped = True
            self._buffer = ""
            return text
        keep = max((k for s in self.stop for k in range(1, len(s)) if self._buffer.endswith(s[:k])), default=0)
        cut = len(self._buffer) - keep
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out

    def flush(self) -> str:
        out, self._buffer = ("" if self.stopped else self._buffer), ""
        return out
