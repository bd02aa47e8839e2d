"""A run's events as chat messages: the inner monologue as collapsible blocks, the answer as the message.

The messages are plain dicts in Gradio's messages format (``role``, ``content``,
``metadata``), so this module needs no Gradio. A block is a message whose
``metadata`` has a ``title``; Gradio shows it folded once its ``status`` is
``"done"`` and with a spinner while it is ``"pending"``.

* The reply the model is writing streams into a pending *Thinking* block; in
  the text protocol the part after a final-answer marker (``AI:``) streams as
  the answer instead (the server's :class:`~chatgpt_tool_hub.server.monologue.Monologue`
  tells the two apart, as it does for ``reasoning_content``).
* When the reply turns out to call a tool, its block becomes that *step*: the
  thought, the action and its input, then the observation when it comes (one
  block per tool step; planner tasks, which run in parallel, each get theirs).
  Steps of nested engines (subtrees) are added to the step that runs them.
* The answer the run returned is what the message says in the end.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable

from ..server.monologue import Monologue

__all__ = ["Transcript", "fenced", "user_messages", "file_message", "error_message", "MEDIA_KINDS"]

THINKING = "Thinking"
MEDIA_KINDS = {
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp"), "image"),
    **dict.fromkeys((".wav", ".wave", ".mp3", ".ogg", ".flac", ".m4a"), "audio"),
    **dict.fromkeys((".mp4", ".webm", ".mov", ".mkv", ".avi"), "video"),
}
_TITLES = {"PlanEvent": "Plan", "SelectionEvent": "Model selection"}
_FENCE = re.compile(r"`{3,}")


def fenced(text: str, language: str = "text") -> str:
    """``text`` in a Markdown code fence longer than any run of backticks inside it."""
    longest = max((len(m) for m in _FENCE.findall(text)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def _input_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        return str(value)


def _block(title: str, content: str = "", status: str = "pending") -> dict:
    return {"role": "assistant", "content": content, "metadata": {"title": title, "status": status}}


def user_messages(text: str, files: list[str]) -> list[dict]:
    """The question as the chat shows it: its text, then each file handed with it."""
    messages = [{"role": "user", "content": text}] if text else []
    return messages + [file_message(path, role="user") for path in files]


def file_message(path: str, role: str = "assistant") -> dict:
    """A file shown in the chat: images, audio and video inline, other files as a download."""
    return {"role": role, "content": {"path": str(path)}}


def error_message(text: str) -> dict:
    return {"role": "assistant", "content": f"⚠️ {text}"}


class Transcript:
    """Feed a run's events with :meth:`feed`; :attr:`messages` is what the chat shows of the run so far.

    ``mode``: ``"react"`` (the text protocol), ``"native"`` (native tool calls) or ``"planner"``.
    """

    def __init__(self, mode: str = "react", clock: Callable[[], float] = time.monotonic):
        self.mode = mode
        self.messages: list[dict] = []
        self.observations: list[str] = []  # every observation of the run (files the tools wrote are named here)
        self.steps = 0
        self._clock = clock
        self._mono: Monologue | None = None     # the reply streaming now, split into reasoning and answer
        self._live: dict | None = None          # the Thinking block of that reply
        self._thought = ""                      # the reply's thought, once parsed
        self._answer: dict | None = None
        self._open: dict[Any, tuple[dict, float]] = {}  # steps waiting for their observation
        self._last_step: dict | None = None

    # ---- events in ----------------------------------------------------------------------

    def feed(self, event: Any) -> None:
        kind = getattr(event, "kind", "")
        depth = getattr(event, "depth", 0)
        if depth > 0:
            if kind != "token":
                self._nested(event, kind, depth)
            return
        if kind == "token":
            self._token(event)
            return
        if kind == "error" and self._mono is not None:  # the reply could not be read: its held text is shown
            for _, piece in self._mono.flush_held():
                self._live_block()["content"] += piece
        self._mono = None  # the reply ended
        if kind == "thought":
            self._thought_event(event)
        elif kind == "action":
            self._action(event)
        elif kind == "observation":
            self._observation(event)
        elif kind == "error":
            self._close_live()
            self.messages.append(_block("The reply could not be read", event.message, "done"))
        elif kind == "answer":
            self._final(event.text)

    def _token(self, event: Any) -> None:
        if self._mono is None:  # a new reply: the last one's block, if no step took it, was a thought
            self._close_live()
            self._mono = Monologue(self.mode)
            self._thought = ""
        if self.mode == "native":  # a thought or the answer: known when the reply ends; shown as it comes
            self._live_block()["content"] += event.text
            return
        for where, piece in self._mono.feed(event):
            if where == "content":
                self._answer_message()["content"] += piece
            else:
                self._live_block()["content"] += piece

    def _thought_event(self, event: Any) -> None:
        title = _TITLES.get(type(event).__name__)
        if title is not None:  # the planner's plan and model choices: blocks of their own
            self._close_live()
            self.messages.append(_block(title, event.text, "done"))
            return
        self._thought = event.text.strip()
        if self._thought:
            self._live_block()["content"] = self._thought

    def _action(self, event: Any) -> None:
        self.steps += 1
        block, self._live = self._live, None  # the reply's block becomes the step
        if block is None:
            block = _block("")
            self.messages.append(block)
        thought = self._thought
        self._thought = ""
        parts = [thought] if thought else []
        parts.append(f"**Action:** `{event.tool}`\n\n**Action Input:**\n{fenced(_input_text(event.tool_input))}")
        block["content"] = "\n\n".join(parts)
        block["metadata"] = {"title": f"Step {self.steps}: {event.tool}", "status": "pending"}
        self._open[self._key(event)] = (block, self._clock())
        self._last_step = block

    def _observation(self, event: Any) -> None:
        self.observations.append(event.observation)
        found = self._open.pop(self._key(event), None)
        if found is None and self._open:  # a step known by its tool only
            key = next((k for k, (b, _) in self._open.items() if b["metadata"]["title"].endswith(f": {event.tool}")),
                       None)
            found = self._open.pop(key) if key is not None else None
        if found is None:
            block, started = _block(f"Observation: {event.tool}"), self._clock()
            self.messages.append(block)
        else:
            block, started = found
        block["content"] += f"\n\n**Observation:**\n{fenced(event.observation)}"
        block["metadata"]["status"] = "done"
        block["metadata"]["duration"] = round(max(0.0, self._clock() - started), 2)

    def _nested(self, event: Any, kind: str, depth: int) -> None:
        pad = "  " * (depth - 1)
        if kind == "thought":
            line = f"{pad}- *{event.text.strip()}*"
        elif kind == "action":
            line = f"{pad}- **{event.tool}** ← `{_input_text(event.tool_input)[:500]}`"
        elif kind == "observation":
            self.observations.append(event.observation)
            line = f"{pad}- → {event.observation[:2000]}"
        elif kind == "error":
            line = f"{pad}- (the reply could not be read: {event.message})"
        else:
            return
        target = self._last_step
        if target is None:
            target = _block("Sub-steps")
            self.messages.append(target)
            self._last_step = target
        target["content"] += ("\n" if target["content"].endswith("\n") or not target["content"] else "\n\n") + line

    def _final(self, answer: str) -> None:
        """The run's answer: the message says it (whatever streamed before); the reply's block is kept as
        the thought that led to it, unless it only held the answer (native mode)."""
        answer = (answer or "").strip()
        live = self._live
        if live is not None:
            text = live["content"].strip()
            if not self._thought and (not text or text == answer or (self.mode == "native" and answer in text)):
                self.messages.remove(live)
                self._live = None
        self._close_live()
        message = self._answer_message()
        message["content"] = answer
        for block, _ in self._open.values():  # steps that never got their observation (a cancelled run)
            block["metadata"]["status"] = "done"
        self._open.clear()

    # ---- helpers ---------------------------------------------------------------------------

    def _key(self, event: Any) -> Any:
        task = getattr(event, "task_id", None)
        return ("task", task) if task is not None else ("step",)

    def _live_block(self) -> dict:
        if self._live is None:
            self._live = _block(THINKING)
            self.messages.append(self._live)
        return self._live

    def _close_live(self) -> None:
        live, self._live = self._live, None
        if live is None:
            return
        if not live["content"].strip():
            self.messages.remove(live)
            return
        live["metadata"] = {"title": "Thought", "status": "done"}

    def _answer_message(self) -> dict:
        if self._answer is None:
            self._answer = {"role": "assistant", "content": ""}
            self.messages.append(self._answer)
        elif self._answer is not self.messages[-1]:  # keep the answer last
            self.messages.remove(self._answer)
            self.messages.append(self._answer)
        return self._answer

    @property
    def answer(self) -> str:
        return self._answer["content"] if self._answer is not None else ""

    def finish(self, note: str | None = None) -> None:
        """The run ended without an answer event (an error, a timeout): close what is open, add ``note``."""
        self._mono = None
        self._close_live()
        for block, _ in self._open.values():
            block["metadata"]["status"] = "done"
        self._open.clear()
        if note:
            self.messages.append(error_message(note))

