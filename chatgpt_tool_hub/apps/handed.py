"""Files handed in with a question, and the taint they bring to its run.

A file handed to an app -- ``files=`` of ``ask``/``run``/``stream``,
``add_file``, an image of a chat request to the server -- carries content
nobody here controls: an image's caption is whatever the picture shows
(written text included), a document says what its author wrote. The run that
gets such a file therefore starts **tainted** (:mod:`chatgpt_tool_hub.run.taint`)
with the provenance ``file handed in: image/ab12cd34.png``, as if a tool had
read untrusted content: egress calls after it go through the
``untrusted_egress`` policy.

The app learns of the files from the messages that announce them, whichever
front end built those: :func:`~chatgpt_tool_hub.apps.files.announcement` makes
its user message an :class:`Announcement`, a plain ``role``/``content`` dict to
everyone else (the file's name is an attribute, never a key, so it never
reaches an LLM). Files added to a session with ``add_file`` taint the
session's next run.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..llm.base import Message
from ..run.taint import RunTaint

__all__ = ["Announcement", "handed_in", "taint_with_files", "file_source"]


class Announcement(dict):
    """A message that announces a file handed in; ``file`` is the file's workspace-relative name."""

    file: str

    def __init__(self, message: Message, file: str):
        super().__init__(message)
        self.file = file


def handed_in(messages: Iterable[Any]) -> list[str]:
    """The names of the files that ``messages`` announce, in order, each once."""
    names: list[str] = []
    for message in messages:
        name = getattr(message, "file", None) if isinstance(message, Announcement) else None
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return names


def file_source(name: str) -> str:
    """The provenance line of a file handed in."""
    return f"file handed in: {name}"


def taint_with_files(taint: RunTaint, names: Iterable[str]) -> None:
    """The run read the files ``names`` handed in with its question."""
    for name in names:
        taint.mark(file_source(name))
