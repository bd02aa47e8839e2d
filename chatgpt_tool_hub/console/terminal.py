"""The LLM-OS terminal's session: questions, and the ``/`` commands.

chatgpt-tool-hub 0.5's terminal commands (``/add TOOL``, ``/del TOOL``,
``/timeout N``, ``/save``, ``/undo``, ``/copy``) sit next to ``/tools``,
``/reset``, ``/depth``, ``/model``, ``/image`` and ``/voice``. The session
works through the app's public API (``add_tool``, ``unregister``, ``reset``,
``add_file``, ``stream``, its ``context`` to build tools with the app's
settings) and keeps its own transcript for ``/save`` and ``/copy``
(``console.transcript``). ``tool-hub`` (``cli.cmd_repl``) reads the lines and
hands each one to :meth:`TerminalSession.handle`.
"""

from __future__ import annotations

import re
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..config import DEFAULT_BASE_URL, Settings
from ..errors import ModelFeedbackError, RunError, ToolHubError, UserError
from ..tools.registry import close_names, shown_name
from . import EventView, print_session_tools
from .transcript import Transcript, Turn, copy_to_clipboard

__all__ = ["TerminalSession", "HELP", "run_question", "Outcome", "empty_reply_help", "unknown_tool_message",
           "forget_last_turn", "cancel_on_interrupt", "speech_parts", "VOICE_INPUT", "VOICE_OUTPUT"]

HELP = """Commands:
  /tools          list the tools of this session
  /add TOOL       add a tool, built with this session's settings
  /del TOOL       remove a tool
  /timeout [N]    stop python code and terminal commands after N seconds (no N: show the limits)
  /reset          forget the conversation
  /undo           forget the last question and its answer (or the last file handed over)
  /save [FILE]    write the conversation to FILE: .json as JSON messages, else Markdown
  /copy           copy the last answer to the clipboard
  /depth N        allow N tool calls per question
  /model NAME     switch the chat model
  /image PATH     hand an image (or WAV audio) to the conversation
  /voice PATH     ask with a WAV recording; the answer is spoken into the workspace
  /schedule WHEN QUESTION   ask QUESTION on a time rule (every 10m, */30 * * * *, @daily);
                  /schedule lists the schedules, /schedule remove ID stops one
  /help           this text
  /exit           leave (Ctrl-D works too)"""

VOICE_INPUT = ("speech-recognition", "stt")    # the first of these in the session transcribes /voice
VOICE_OUTPUT = ("text-to-speech", "tts")       # and the first of these speaks the answer
TIMEOUT_TOOLS = ("python", "terminal")         # /timeout sets <name>_timeout and rebuilds these
DEFAULT_SESSION = "default"
_MARKDOWN = re.compile(r"[*_`#>|~]+")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


# ---- one question ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    answer: str | None  # None: no answer came
    empty: bool = False  # the model only sent empty replies
    cancelled: bool = False  # the run was cancelled (Ctrl-C)


def run_question(app: Any, question: str, view: Callable[[Any], None], *, files: Iterable[Any] = ()) -> Outcome:
    """Stream ``question`` through ``view``; the stand-in answer of a run that got only empty replies is held back
    (``Outcome.empty``), so the caller can say which setting to check instead."""
    files = list(files)
    seen = False
    outcome = Outcome(None)
    for event in (app.stream(question, files=files) if files else app.stream(question)):
        kind = event.kind
        if kind == "answer" and getattr(event, "depth", 0) == 0:
            if event.stopped_by == "parse_error" and not seen:
                outcome = Outcome(None, empty=True)
                continue
            outcome = Outcome(event.text, cancelled=event.stopped_by == "cancelled")
        elif kind in ("thought", "action", "observation") or (kind == "token" and event.text.strip()):
            seen = True
        view(event)
    return outcome


def empty_reply_help(app: Any) -> str:
    model = str(getattr(getattr(app, "llm", None), "model_name", "") or "?")
    if model.startswith("local:"):
        where = f"MODEL_NAME ({model!r}) names a chat model that loads and LOCAL_MAX_NEW_TOKENS is above 0"
    else:
        base = (getattr(app, "config", None) or {}).get("llm_api_base_url") or DEFAULT_BASE_URL
        where = f"MODEL_NAME ({model!r}) names a chat model that the server at LLM_API_BASE_URL ({base}) serves"
    return (f"the model sent back empty replies (no text, no tool call), so there is no answer. Check that {where}; "
            f"the server's log may say why.")


def unknown_tool_message(name: str, known: Iterable[str], hint: str = "`tool-hub tools` lists every tool") -> str:
    close = close_names(name, known)
    guess = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown tool {shown_name(name)}{guess} ({hint})"


def forget_last_turn(app: Any, session_id: str = DEFAULT_SESSION) -> bool:
    """Drop the session's last question and answer (or file announcement) from the app's memory."""
    forget = getattr(app, "forget_last_turn", None)
    return bool(forget(session_id)) if forget is not None else False


@contextmanager
def cancel_on_interrupt(app: Any, notice: Callable[[], None]) -> Iterator[None]:
    """While the block runs, the first Ctrl-C cancels the app's runs (``app.cancel`` from a thread, as a
    signal handler may not block) so the run ends cleanly with its steps so far; a second Ctrl-C raises
    ``KeyboardInterrupt`` as usual. Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(app, "cancel"):
        yield
        return
    pressed: list[int] = []

    def on_interrupt(signum: int, frame: Any) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(signum)
        notice()
        threading.Thread(target=app.cancel, name="tool-hub-cancel", daemon=True).start()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def speech_parts(text: str, limit: int) -> list[str]:
    """``text`` without Markdown marks, in parts of at most ``limit`` characters cut at sentences, else words."""
    clean = " ".join(_MARKDOWN.sub("", text).split())
    if not clean:
        return []
    if limit <= 0 or len(clean) <= limit:
        return [clean]
    parts: list[str] = []
    current = ""
    for piece in _SENTENCE_END.split(clean):
        while len(piece) > limit:  # one long sentence: at the last space that fits
            cut = piece.rfind(" ", 0, limit + 1)
            cut = cut if cut > 0 else limit
            head, piece = piece[:cut].strip(), piece[cut:].strip()
            if current:
                parts.append(current)
                current = ""
            parts.append(head)
        if current and len(current) + 1 + len(piece) > limit:
            parts.append(current)
            current = ""
        current = f"{current} {piece}".strip()
    if current:
        parts.append(current)
    return [p for p in parts if p]


# ---- the session --------------------------------------------------------------------------------------------


class TerminalSession:
    """One terminal session over ``app``: :meth:`handle` takes each line the user typed."""

    def __init__(self, app: Any, console: Any, *, view: Any = None):
        self.app = app
        self.console = console
        self.view = view if view is not None else EventView(console, verbose=True)
        self.transcript = Transcript()
        self.overrides: dict[str, float] = {}  # settings /timeout changed for this session
        self._commands: dict[str, Callable[[str], Any]] = {
            "/tools": self._tools, "/add": self._add, "/del": self._del, "/timeout": self._timeout,
            "/reset": self._reset, "/undo": self._undo, "/save": self._save, "/copy": self._copy,
            "/depth": self._depth, "/model": self._model, "/image": self._image, "/file": self._image,
            "/audio": self._image, "/voice": self._voice, "/schedule": self._schedule, "/help": self._help,
        }
        self._listening = False  # answers of scheduled questions are printed once the first schedule is made

    # ---- lines ----------------------------------------------------------------------------------

    def handle(self, line: str) -> bool:
        """Run one line (a question or a ``/`` command); True means leave."""
        line = line.strip()
        if not line:
            return False
        if not line.startswith("/"):
            self.ask(line)
            return False
        name, _, arg = line.partition(" ")
        if name in ("/exit", "/quit"):
            return True
        command = self._commands.get(name)
        if command is None:
            self.say(f"unknown command {name}; /help lists them")
            return False
        try:
            command(arg.strip())
        except KeyboardInterrupt:  # e.g. a model loading for /voice: the session goes on
            self.console.print("[red]interrupted[/]")
        return False

    def ask(self, question: str, *, kind: str = "question", turn_files: Iterable[str] = ()) -> str | None:
        """Ask ``question``, show what happens, keep the turn; the answer, or None when there is none."""
        try:
            with cancel_on_interrupt(self.app, lambda: self.console.print(
                    "[red]cancelling[/] (Ctrl-C again to stop at once)")):
                outcome = run_question(self.app, question, self.view)
        except KeyboardInterrupt:
            self.console.print("[red]interrupted[/]")
            return None
        except (RunError, UserError) as exc:
            self.error(f"{type(exc).__name__}:", str(exc))
            return None
        finally:
            self.view.close()
        if outcome.empty:
            forget_last_turn(self.app)  # the app kept its stand-in answer: the next question starts clean
            self.error("no answer:", empty_reply_help(self.app))
            return None
        if outcome.cancelled:
            forget_last_turn(self.app)  # a cancelled question is not part of the conversation
            self.console.print("[red]cancelled[/]: the question and its partial answer are forgotten")
            return None
        self.transcript.add(Turn(kind, question, outcome.answer or "", list(turn_files)))
        return outcome.answer

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=not self.console.is_terminal)

    def error(self, label: str, text: str) -> None:
        from rich.markup import escape

        self.console.print(f"[red]{escape(label)}[/] {escape(text)}", highlight=False,
                           soft_wrap=not self.console.is_terminal)

    # ---- tools --------------------------------------------------------------------------------

    def _tools(self, arg: str) -> None:
        print_session_tools(self.console, self.app.tools)

    def _context(self) -> Any:
        """The app's context, with this session's /timeout settings."""
        context = self.app.context
        if not self.overrides:
            return context
        return replace(context, settings=Settings({**dict(context.settings), **self.overrides}))

    def _build(self, name: str) -> Any:
        """A tool built as create_app builds them: with the session's context, its folder made on first use."""
        from ..runtime.workspace import DEFER_CREATION

        deferred = DEFER_CREATION.set(True)
        try:
            tool = self._context().build_tool(name)
            tool.parameter_schema  # noqa: B018 - checked now, as create_app does
        finally:
            DEFER_CREATION.reset(deferred)
        return tool

    def _registered(self, name: str) -> str | None:
        registry = self.app.context.registry
        resolved = registry.resolve_name(name) if registry is not None else None
        if resolved is None:
            known = registry.get_registered_tool_names() if registry is not None else []
            self.say(unknown_tool_message(name, known, "tool-hub tools lists every tool"))
        return resolved

    def _session_tool(self, name: str) -> Any:
        by_name = {tool.name: tool for tool in self.app.tools}
        if name in by_name:
            return by_name[name]
        return next((tool for key, tool in by_name.items() if key.lower() == name.lower()), None)

    def _add(self, arg: str) -> None:
        if not arg:
            return self.say("usage: /add TOOL (tool-hub tools lists them)")
        resolved = self._registered(arg)
        if resolved is None:
            return None
        if self._session_tool(resolved) is not None:
            return self.say(f"{resolved} is already a tool of this session")
        try:
            tool = self._build(resolved)
        except ToolHubError as exc:
            return self.say(f"cannot add {resolved}: {exc}")
        self.app.add_tool(tool)
        note = " (it asks before each call)" if getattr(tool, "dangerous", False) else ""
        self.say(f"added {tool.name}{note}")

    def _del(self, arg: str) -> None:
        if not arg:
            return self.say("usage: /del TOOL (/tools lists this session's tools)")
        tool = self._session_tool(arg)
        try:
            self.app.unregister(tool.name if tool is not None else arg)
        except UserError as exc:
            return self.say(str(exc))
        self.say(f"removed {tool.name if tool is not None else arg}")

    def _timeout(self, arg: str) -> None:
        present = [(name, self._session_tool(name)) for name in TIMEOUT_TOOLS]
        present = [(name, tool) for name, tool in present if tool is not None]
        if not arg:
            if not present:
                return self.say("no python or terminal tool in this session (/add python adds one)")
            return self.say("; ".join(f"{name} stops after {getattr(tool, 'timeout', '?'):g} s" for name, tool in
                                      present) + "; /timeout N changes it")
        try:
            seconds = float(arg)
        except ValueError:
            seconds = 0.0
        if not seconds > 0 or seconds == float("inf"):
            return self.say("usage: /timeout N (seconds, a number > 0)")
        before = dict(self.overrides)
        self.overrides.update({f"{name}_timeout": seconds for name in TIMEOUT_TOOLS})
        for name, old in present:  # rebuilt with the new setting; the old one is closed
            try:
                new = self._build(name)
            except ToolHubError as exc:
                self.overrides = before
                return self.say(f"cannot set the timeout: {exc}")
            self.app.add_tool(new)  # same name: it takes the old one's place
            old.close()
        rebuilt = " and ".join(name for name, _ in present) or "python and terminal (when added)"
        note = " (python's variables start afresh)" if any(name == "python" for name, _ in present) else ""
        verb = "stops" if len(present) == 1 else "stop"
        self.say(f"{rebuilt} now {verb} after {seconds:g} s{note}")

    # ---- the conversation -------------------------------------------------------------------

    def _reset(self, arg: str) -> None:
        self.app.reset()
        self.transcript.clear()
        self.say("conversation forgotten")

    def _undo(self, arg: str) -> None:
        turn = self.transcript.pop()
        if turn is None:
            return self.say("nothing to undo")
        forget_last_turn(self.app)
        what = f"the file {turn.text}" if turn.kind == "file" else f"\"{_short(turn.text)}\" and its answer"
        self.say(f"forgot {what} (tool state, such as python's variables, stays)")

    def _save(self, arg: str) -> None:
        if not len(self.transcript):
            return self.say("nothing to save yet")
        try:
            path, kind = self.transcript.save(arg or None, str(getattr(self.app.llm, "model_name", "") or ""))
        except UserError as exc:
            return self.say(str(exc))
        count = len(self.transcript)
        self.say(f"saved {count} turn{'s' if count != 1 else ''} to {path} ({kind})")

    def _copy(self, arg: str) -> None:
        answer = self.transcript.last_answer()
        if answer is None:
            return self.say("no answer to copy yet")
        try:
            used = copy_to_clipboard(answer)
        except UserError as exc:
            return self.say(f"cannot copy: {exc}")
        self.say(f"copied the last answer ({len(answer)} characters) with {used}")

    def _depth(self, arg: str) -> None:
        if not arg.isdigit():
            return self.say("usage: /depth N (a whole number >= 0)")
        self.app.set_think_depth(int(arg))
        self.say(f"think depth is now {arg}")

    def _model(self, arg: str) -> None:
        if not arg:
            return self.say(f"model: {getattr(self.app.llm, 'model_name', '?')}; usage: /model NAME")
        try:
            self.app.set_model(arg)
        except ToolHubError as exc:
            return self.say(f"cannot switch model: {exc}")
        self.say(f"model is now {arg}")

    def _image(self, arg: str) -> None:
        if not arg:
            return self.say("usage: /image PATH")
        try:
            saved = self.app.add_file(arg.strip("'\""))
        except ToolHubError as exc:
            return self.say(f"cannot use that file: {exc}")
        self.transcript.add(Turn("file", saved))
        self.say(f"received: saved as {saved} in the workspace")

    def _help(self, arg: str) -> None:
        self.say(HELP)

    # ---- voice --------------------------------------------------------------------------------------

    def _schedule(self, arg: str) -> None:
        from ..apps.schedule import scheduler_for, terminal_command

        if not hasattr(self.app, "schedule"):
            return self.say("this app cannot schedule questions (only the ReAct app can)")
        if not self._listening:
            scheduler_for(self.app).listeners.append(self._print_scheduled)
            self._listening = True
        try:
            self.say(terminal_command(self.app, arg))
        except ToolHubError as exc:
            self.say(str(exc))

    def _print_scheduled(self, schedule: Any, result: Any) -> None:
        text = getattr(result, "output", None) or f"failed: {result}"
        self.say(f"\n[scheduled {schedule.name or schedule.id}] {text}")

    def _voice(self, arg: str) -> None:
        if not arg:
            return self.say("usage: /voice PATH (a WAV recording of the question)")
        listen = next((t for t in map(self._session_tool, VOICE_INPUT) if t is not None), None)
        speak = next((t for t in map(self._session_tool, VOICE_OUTPUT) if t is not None), None)
        missing = [names[0] for names, tool in ((VOICE_INPUT, listen), (VOICE_OUTPUT, speak)) if tool is None]
        if missing or listen is None or speak is None:
            return self.say(f"/voice needs the {' and '.join(missing)} tool{'s' if len(missing) > 1 else ''}: start "
                            f"tool-hub with --tools speech-recognition,text-to-speech, or "
                            + " and ".join(f"/add {name}" for name in missing))
        source = arg.strip("'\"")
        if Path(source).suffix.lower() not in (".wav", ".wave"):
            return self.say(f"/voice takes a WAV file; {source} is not one (convert it first, e.g. "
                            f"ffmpeg -i {Path(source).name} question.wav)")
        from ..apps.files import ingest_file
        from ..tools.base import ToolResult

        workspace = Path(self.app.context.workspace)
        try:
            _, recording = ingest_file(source, workspace)
        except ToolHubError as exc:
            return self.say(f"cannot use that file: {exc}")
        heard = self._call(listen, recording)
        if heard is None:
            return None
        transcript = str(getattr(heard, "value", heard)).strip()
        if not transcript or (listen.name == "speech-recognition" and not isinstance(heard, ToolResult)):
            return self.say(f"no question heard: {heard}")
        self.say(f"you (voice)> {transcript}")
        answer = self.ask(transcript, kind="voice", turn_files=[recording])
        if not answer:
            return None
        limit = int((getattr(speak, "options", None) or {}).get("max_chars", 0) or 0)
        spoken: list[str] = []
        for part in speech_parts(answer, limit):
            result = self._call(speak, part)
            if result is None:
                break
            name = str(getattr(result, "value", result)).strip()
            path = Path(name) if Path(name).is_absolute() else workspace / name
            if not path.is_file():
                self.say(f"{speak.name}: {result}")
                continue
            spoken.append(name)
            self.say(f"spoken answer: {path}")
        self.transcript.turns[-1].files.extend(spoken)

    def _call(self, tool: Any, tool_input: str) -> Any:
        try:
            return tool.run(tool_input)
        except ModelFeedbackError as exc:
            self.say(f"{tool.name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a model that fails to load: said, and the session goes on
            self.say(f"{tool.name} failed: {type(exc).__name__}: {exc}")
        return None

    # ---- the banner -----------------------------------------------------------------------------------

    def banner(self, version: str) -> None:
        from rich.markup import escape

        self.console.print(f"[bold]LLM-OS[/] · chatgpt_tool_hub {version} · model "
                           f"[cyan]{escape(str(getattr(self.app.llm, 'model_name', '?')))}[/] · tools: "
                           f"{escape(', '.join(self.app.tool_names)) or '(none)'}")
        self.console.print("Type a question, or /help. Ctrl-D to leave.\n")


def _short(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
