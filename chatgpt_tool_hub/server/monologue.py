"""A run's events as what chat clients show: the inner monologue as ``reasoning_content``, the answer as
``content``.

In the text protocol (the ReAct app) the model's reply streams live: what comes
before a final-answer marker (``AI:``, ``Final Answer:``) at the start of a line
is reasoning, what follows it is the answer, as it is written. From an
``Action:`` line on, the reply is held: the action is shown from the parsed
action event instead. With native tool calls a reply is held until it is known
to be a thought (a tool call follows) or the answer; in planner mode the
response call streams live as the answer. At the end the answer the run
returned is what counts: the part of it not streamed yet is sent then.

The reasoning is Markdown, well formed by construction, since chat UIs render
it: every part (a thought, an action with its input, an observation, the plan,
the model selections, an error) is a block of its own, with a blank line before
it (:meth:`Monologue._block`). What a tool or the model handed over as data
(action inputs, observations, errors, the reply's unparsed rest) is a code
fence (:func:`fence`) nothing inside can close; the plan's arguments are code
spans; names and reasons are escaped. A code fence a thought leaves open is
closed when the thought ends. Steps of nested engines are block quotes.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from ..planner.events import PlanEvent, SelectionEvent

__all__ = ["Monologue", "fence"]

_ANSWER = re.compile(r"^[ \t>*_#]*(?:\*\*|__)?(?:AI|Final[ _]?Answer)(?:\*\*|__)?\s*[:：](?:\*\*|__)?[ \t]*",
                     re.IGNORECASE | re.MULTILINE)
_ACTION = re.compile(r"^[ \t>*_#]*(?:\*\*|__)?Action(?:\*\*|__)?\s*[:：]", re.IGNORECASE | re.MULTILINE)
_BACKTICKS = re.compile(r"`+")
_NAME = re.compile(r"[\w.:/-]+")
_INLINE_MARKUP = re.compile(r"([\\`*_\[\]<>!&~|])")
_LANGUAGES = {"python": "python"}  # the language a tool's text input is written in, where it is known
_PROBE = "tool-hub-probe"  # a paragraph after a thought: when it does not parse as one, a fence was left open


def fence(text: str, info: str = "") -> str:
    """``text`` as a Markdown code fence, opened and closed on lines of their own by a run of backticks longer
    than any inside ``text`` (at least three), so nothing in it can end the block or be read as Markdown.

    ``info`` names the language, only when it is known (``"python"``, ``"json"``). The fence's content is
    ``text`` exactly, plus the newline that ends its last line when it has none; the result ends with a
    newline.
    """
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    bar = "`" * max(3, longest + 1)
    body = text if not text or text.endswith("\n") else text + "\n"
    return f"{bar}{info}\n{body}{bar}\n"


def _code_span(text: str) -> str:
    """``text`` on one line as a Markdown code span no backtick inside can end."""
    text = " ".join(text.splitlines()) or " "
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    bar = "`" * (longest + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{bar}{pad}{text}{pad}{bar}"


def _plain(text: str) -> str:
    """``text`` on one line, its inline Markdown and HTML escaped: shown as written, never as markup."""
    return _INLINE_MARKUP.sub(r"\\\1", " ".join(text.split()))


def _name(name: str) -> str:
    return name if _NAME.fullmatch(name) else _plain(name) or "(no name)"


def _input_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        return str(value)


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _input_block(tool: str, value: Any) -> str:
    info = _LANGUAGES.get(tool, "") if isinstance(value, str) else "json"
    return "Action Input:\n\n" + fence(_input_text(value), info)


def _quote(text: str, depth: int) -> str:
    """``text`` (whole lines) as a block quote ``depth`` deep: a nested engine's step."""
    if depth <= 0:
        return text
    mark = "> " * depth
    return "".join(mark + line if line.rstrip("\n") else mark.rstrip() + "\n" for line in text.splitlines(True))


@functools.lru_cache(maxsize=1)
def _commonmark() -> Any:
    """A CommonMark parser (markdown-it-py, which rich depends on), or None without it."""
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # pragma: no cover - rich depends on it
        return None
    return MarkdownIt("commonmark")


def _unclosed_fence(prose: str) -> str:
    """The line that closes the code fence ``prose`` (model-written Markdown) leaves open, or ``""``."""
    parser = _commonmark()
    if parser is None:  # pragma: no cover
        return ""
    tokens = parser.parse(f"{prose}\n\n{_PROBE}\n")
    last = tokens[-1] if tokens else None
    if last is not None and last.type == "fence" and last.level == 0 and last.content.endswith(f"{_PROBE}\n"):
        return last.markup
    return ""


class Monologue:
    """Feed a run's events; get ``(field, text)`` deltas, ``field`` being ``"reasoning"`` or ``"content"``.

    ``mode``: ``"react"`` (the text protocol), ``"native"`` (native tool calls) or ``"planner"``.
    """

    def __init__(self, mode: str = "react"):
        self.mode = mode
        self.reasoning: list[str] = []
        self.content = ""          # the answer sent so far
        self._reply = ""           # the reply streaming now (depth 0)
        self._sent = 0             # how much of it went out
        self._held = -1            # where its action starts (held: shown from the action event), -1: none
        self._answering = False    # past its final-answer marker
        self._in_reply = False
        self._reply_had_tokens = False
        self._prose = ""           # the thought streaming now, as it went out
        self._last = ""            # the kind of the last block ("selection": the next one joins its list)

    # ---- events in, deltas out --------------------------------------------------------

    def feed(self, event: Any) -> list[tuple[str, str]]:
        kind = getattr(event, "kind", "")
        depth = getattr(event, "depth", 0)
        if kind == "token" and depth == 0:
            return self._token(event.text)
        out = self._end_reply() if kind != "answer" else []
        if kind == "answer":
            if depth == 0:
                out += self._answer(event.text)
            return out
        if kind == "action" and depth == 0:
            self._held = -1  # the reply's action: shown from the event
        elif kind != "thought" or depth > 0:  # the reply's thought comes between the reply and its action
            out += self._release()
        return out + self._event(event, kind, depth)

    def _event(self, event: Any, kind: str, depth: int) -> list[tuple[str, str]]:
        if kind == "thought":
            return self._thought(event, depth)
        if kind == "action":
            return self._block(self._action(event), depth)
        if kind == "observation":
            if depth == 0:
                self._reply_had_tokens = False
            return self._block(self._observation(event), depth)
        if kind == "error":
            label = "The reply could not be read" if event.error_type in ("", "OutputParserError") else "Error"
            return self._block(f"{label}:\n\n{fence(event.message)}", depth)
        return []

    def _thought(self, event: Any, depth: int) -> list[tuple[str, str]]:
        if isinstance(event, PlanEvent) and event.tasks:
            return self._block(self._plan(event), depth)
        if isinstance(event, SelectionEvent):
            return self._block(self._selection(event), depth, "selection")
        if depth == 0 and self._reply_had_tokens and self.mode != "planner":
            return []  # the reply said it already
        text = event.text.strip()
        if not text:
            return []
        if depth > 0:
            return self._block(f"Thought: {text}\n", depth)
        return self._prose_piece(f"Thought: {text}\n") + self._end_prose()

    # ---- the blocks ----------------------------------------------------------------------

    def _action(self, event: Any) -> str:
        task = getattr(event, "task_id", None)
        about = ""
        if task is not None:
            model = getattr(event, "model", None)
            about = f" (task {task}" + (f", model {_code_span(model)}" if model else "") + ")"
        return f"Action: {_name(event.tool)}{about}\n\n" + _input_block(event.tool, event.tool_input)

    def _observation(self, event: Any) -> str:
        task = getattr(event, "task_id", None)
        label = "Observation:"
        if task is not None:
            status = getattr(event, "status", "ok")
            label = f"Observation (task {task}" + ("" if status == "ok" else f", {_plain(status)}") + "):"
        return f"{label}\n\n{fence(event.observation)}"

    def _plan(self, event: PlanEvent) -> str:
        lines = []
        for task in event.tasks:
            after = [d for d in task.get("dep", []) if isinstance(d, int) and d >= 0]
            line = f"- task {_plain(str(task.get('id', '?')))}: {_code_span(str(task.get('task', '')))}"
            line += f" {_code_span(_compact(task['args']))}" if task.get("args") else ""
            lines.append(line + (f", after task {', '.join(map(str, after))}" if after else "") + "\n")
        count = len(event.tasks)
        return f"Plan ({count} task{'s' if count != 1 else ''}):\n\n" + "".join(lines)

    def _selection(self, event: SelectionEvent) -> str:
        line = f"- task {event.task_id}: model {_code_span(event.model or '')}"
        reason = _plain(event.reason)
        return line + (f": {reason}" if reason else "") + "\n"

    def _block(self, text: str, depth: int = 0, kind: str = "") -> list[tuple[str, str]]:
        """A block of the monologue (whole lines), after a blank line; the first model selection starts
        their list under a heading of its own, the next ones join it."""
        out = self._end_prose()
        joins = kind == "selection" and self._last == "selection" and depth == 0
        if kind == "selection" and not joins:
            text = "Models:\n\n" + text
        self._last = kind
        body = _quote(text, depth)
        return out + [self._reason(body if joins else self._gap() + body)]

    def _gap(self) -> str:
        """What puts the next block after a blank line."""
        tail = "".join(self.reasoning[-2:])[-2:]
        if not tail or tail == "\n\n":
            return ""
        return "\n" if tail.endswith("\n") else "\n\n"

    def _prose_piece(self, text: str) -> list[tuple[str, str]]:
        """A piece of a thought: the model's own Markdown, starting a block when it is the thought's first."""
        if not self._prose:
            self._last = "prose"
            text = self._gap() + text
        self._prose += text
        return [self._reason(text)]

    def _end_prose(self) -> list[tuple[str, str]]:
        """The thought ended: close the code fence it left open, if any."""
        prose, self._prose = self._prose, ""
        closer = _unclosed_fence(prose) if "`" in prose or "~" in prose else ""
        if not closer:
            return []
        return [self._reason(("" if prose.endswith("\n") else "\n") + closer + "\n")]

    def flush_held(self) -> list[tuple[str, str]]:
        """The end of the reply streaming now, and its held action text when no action event will take its
        place (the reply could not be read): the deltas, as data."""
        return self._end_reply() + self._release()

    def _release(self) -> list[tuple[str, str]]:
        """The reply's held action when no action event took its place: its text, as data."""
        if self._held < 0:
            return []
        held, self._held = self._reply[self._held:], -1
        return self._block(fence(held)) if held.strip() else []

    def _reason(self, text: str) -> tuple[str, str]:
        self.reasoning.append(text)
        return "reasoning", text

    # ---- the reply, as it streams ----------------------------------------------------------

    def _token(self, text: str) -> list[tuple[str, str]]:
        if not self._in_reply:
            out = self._release()
            self._in_reply, self._reply, self._sent, self._answering = True, "", 0, False
            self._reply_had_tokens = True
        else:
            out = []
        self._reply += text
        if self.mode == "planner":
            return out + self._say(text)
        if self.mode == "native" or self._held >= 0:
            return out  # native: a thought or the answer, known when the reply ends
        if self._answering:
            return out + self._say(text)
        for start in self._unsent_lines():
            if _ACTION.match(self._reply, start):
                self._held = start
                return out + self._stream_to(start)
            marker = _ANSWER.match(self._reply, start)
            if marker is not None:
                out += self._stream_to(start) + self._end_prose()
                self._answering = True
                self._sent = len(self._reply)
                rest = self._reply[marker.end():]
                return out + (self._say(rest) if rest else [])
        return out + self._stream_to(self._reply.rfind("\n") + 1)  # hold the line being written: it may be a marker

    def _unsent_lines(self) -> list[int]:
        """Where the lines of the reply not sent yet start (a marker starts a line)."""
        starts = [self._sent]
        at = self._reply.find("\n", self._sent)
        while at >= 0:
            starts.append(at + 1)
            at = self._reply.find("\n", at + 1)
        return starts

    def _stream_to(self, end: int) -> list[tuple[str, str]]:
        if end <= self._sent:
            return []
        piece, self._sent = self._reply[self._sent:end], end
        return self._prose_piece(piece)

    def _say(self, text: str) -> list[tuple[str, str]]:
        if not self.content:
            text = text.lstrip()
        if not text:
            return []
        self.content += text
        return [("content", text)]

    def _end_reply(self) -> list[tuple[str, str]]:
        if not self._in_reply:
            return []
        self._in_reply = False
        if self.mode == "react" and not self._answering:
            return self._stream_to(self._held if self._held >= 0 else len(self._reply))
        if self.mode == "native" and self._reply.strip():
            return self._prose_piece(self._reply.strip() + "\n") + self._end_prose()
        return []

    def _answer(self, answer: str) -> list[tuple[str, str]]:
        """The run's answer: what was not streamed of it yet (the held reply of native mode, a fallback)."""
        out: list[tuple[str, str]] = []
        if self._in_reply and self.mode == "react" and not self._answering:
            out += self._stream_to(self._held if self._held >= 0 else len(self._reply))
        out += self._release() + self._end_prose()
        self._in_reply = False
        answer = (answer or "").strip()
        sent = self.content.strip()
        if not sent:
            return out + self._say(answer)
        if answer.startswith(sent):
            rest = answer[len(sent):]
            if self.content != self.content.rstrip():
                rest = rest.lstrip()
            return out + self._say(rest)
        return out + self._say("\n\n" + answer)  # the run answered otherwise than the reply that streamed

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning).strip()
