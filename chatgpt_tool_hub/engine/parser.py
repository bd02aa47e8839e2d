"""Read an LLM's ReAct reply as an :class:`Action` or a :class:`Finish`.

Pipeline, one small function per step (steps 1-3 in :mod:`chatgpt_tool_hub.engine.markers`):

1. **Drop think blocks** — ``<think>…</think>``; nothing inside is ever an action.
2. **Normalise markers** — line-anchored ``Thought`` / ``Action`` / ``Action Input`` /
   ``Final Answer`` / ``AI`` / ``Observation`` in any case, with ``:`` or ``：``,
   spaces (NBSP, zero-width, BOM too) around them, markdown bold or a header,
   numbers (``Action 1:``); ``Final Answer`` alone on its line needs no colon.
   List items (``1. Action:``) and the Chinese markers (``思考：`` ``行动：``
   ``行动输入：`` ``最终答案：`` ``观察：``) count only in a reply that uses them for
   an action with its input, or for a final answer, so ordinary notes stay prose.
   A plain ``` fence around the whole reply is markup and goes; other fences are
   code, and markers inside them are ignored. The text between markers is kept
   verbatim; trailing end-of-turn tokens (``<|im_end|>``) are not text.
3. **Cut at observation** — the first line-anchored ``Observation:`` (hallucinated
   by the LLM) and a trailing stop-word fragment such as ``Obs`` end the reply.
4. **Locate** the first action, final answer or JSON action (at a line start, or a
   complete one inside prose); the earliest wins. A marker or the "Do I need to use a
   tool?" question that does not start its line is prose. With none of them, a
   ``finish(answer="x")`` / ``final_answer("x")`` call that ends the reply is the answer.
5. **Extract the input** — ``search[x]``, ``search("x")``, a fenced block, a JSON or
   Python-literal dict, matching quotes stripped, a raw line break inside a call's
   string read as its escape — or the final answer.

A reply written exactly in the prompt's format (``Thought:`` / ``Action:`` / ``Action Input:``, or
``AI:`` / ``Final Answer:``, and nothing that any step above would change) is read first by a fast path
that gives the same reading as the full pipeline; any other reply goes through every step.

What cannot be recovered raises :class:`OutputParserError` whose ``feedback``
tells the LLM which part of the format it broke. Every step is linear in the
input; JSON and literal parsing are bounded in size and depth.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from itertools import islice
from typing import Any, Sequence

from chatgpt_tool_hub.engine.callargs import call_arguments, strip_quotes
from chatgpt_tool_hub.engine.markers import (
    FENCE_RE,
    LEAD,
    MARKER_RE,
    MAYBE_MARKER_LINE_RE,
    MAYBE_MARKER_RE,
    SPACE,
    THINK_RE,
    Marker,
    cut_observation,
    drop_end_tokens,
    drop_think,
    fence_blocks,
    find_markers,
    stop_fragment,
    unwrap_fence,
)
from chatgpt_tool_hub.errors import OutputParserError
from chatgpt_tool_hub.jsontext import loads_lenient, scan_bracketed

__all__ = ["Action", "Finish", "parse_output", "FINAL_PREFIXES", "FINISH_TOOL_NAMES"]

FINAL_PREFIXES = ("AI", "Final Answer")  # the prompts ask for the first
FINISH_TOOL_NAMES = ("answer-user", "answer_user", "final answer", "final_answer", "final-answer")


@dataclass(frozen=True)
class Action:
    """The LLM asks to run ``tool`` with ``tool_input``; ``log`` is the text used."""

    tool: str
    tool_input: str | dict[str, Any]
    thought: str = ""
    log: str = ""


@dataclass(frozen=True)
class Finish:
    """The LLM answers the user with ``output``; ``log`` is the text used."""

    output: str
    thought: str = ""
    log: str = ""


_MAX_OBJECT = 200_000  # characters scanned for one {...} object
_MAX_DEPTH = 100  # nesting accepted before json / ast.literal_eval are tried
_MAX_LITERAL = 20_000  # characters handed to ast at most
_MAX_JSON_TRIES = 10  # line-start "{" candidates tried per reply

_FAST_RE = re.compile(  # the prompt's own format: see _fast_parse
    r"(?:[^{`]*?\n)??(?:Action: (?P<tool>[^\n]*)\nAction Input:(?![*_])(?P<input>.*)"
    r"|(?P<final>AI|Final Answer):(?![*_])(?P<output>.*))", re.DOTALL)
_INLINE_INPUT_RE = re.compile(rf"action(?:{SPACE}|_)*input{SPACE}*[:：]", re.IGNORECASE)
_NEED_TOOL_RE = re.compile(r"do i need to use a tool\s*\?\s*(yes|no)\b", re.IGNORECASE)
_NEED_LEAD_RE = re.compile(  # what may come before that question on its line; a Thought marker opens the line
    rf"{LEAD}(?P<thought>(?:thoughts?|思考)(?:{SPACE}*#?\d{{1,3}})?(?:{SPACE}*(?:\*\*?|__?))?{SPACE}*[:：])?{SPACE}*",
    re.IGNORECASE | re.MULTILINE)
_JSON_START_RE = re.compile(r"^[ \t]*\{", re.MULTILINE)
_EMBEDDED_JSON_RE = re.compile(r"\{\s*[\"']")
_FINAL_CALL_RE = re.compile(  # a line that opens a call of a final-answer tool: finish(, final_answer(, ...
    r"^[ \t]*(?P<name>finish(?:[ _-]*answer)?|final[ _-]*answer|answer[ _-]*user)[ \t]*[(\[]",
    re.IGNORECASE | re.MULTILINE)
_SEPARATORS_RE = re.compile(r"[\s_-]+")
_MD_ESCAPE_RE = re.compile(r"\\([_*\-`~.#+!|\[\]()<>])")  # markdown's backslash escapes
_FINISH_CALLS = frozenset(("finish", "finishanswer", "answer"))  # the ReAct paper's Finish[answer]
_ANSWER_KEYS = ("answer", "output", "result")  # the argument of a final-answer call that holds the answer
_NO_TOOL = {"", "none", "n/a", "na", "null", "nil", "no", "nothing", "no tool", "-"}
_WRAPPERS = ("tool_call", "function_call", "function", "call", "action")  # {"tool_call": {...action...}}

_FORMAT = ("Reply in exactly this format:\n"
           "Thought: Do I need to use a tool? Yes\nAction: <one tool name>\nAction Input: <the input>\n"
           "or, when you can answer:\nThought: Do I need to use a tool? No\nAI: <your answer>")
_JSON_FORMAT = 'Or send one JSON object: {"action": "<one tool name>", "action_input": "<the input>"}.'
_PROBLEMS = {
    "empty": "Your reply was empty.",
    "missing_input": "Your reply had 'Action: {tool}' but no 'Action Input:' line.",
    "missing_action": "Your reply had 'Action Input:' but no 'Action:' line naming the tool.",
    "said_yes": "You wrote 'Do I need to use a tool? Yes' but no 'Action:' line naming the tool.",
    "thought_only": "Your reply had 'Thought:' but neither an 'Action:' line nor an 'AI:' line.",
    "no_answer": "You wrote 'Do I need to use a tool? No' but no 'AI:' line with your answer.",
    "empty_answer": "Your reply had 'AI:' (or 'Final Answer:', or the final-answer action) but no answer after it.",
    "no_tool": ("Your reply had 'Action: {tool}', which is not a tool. 'Action:' must name exactly one "
                "tool; when you need none, answer with 'AI:' instead."),
    "truncated_json": ("Your reply has a JSON object that is {detail}. "
                       "Send the complete object with every brace and quote closed."),
    "unknown_json": ('Your reply was a JSON object but not an action: it needs an "action" key naming '
                     'the tool and an "action_input" key.'),
    "json_no_input": 'Your JSON action named "{tool}" but had no "action_input" key.',
    "observation": ("Your reply contained 'Observation:' but no 'Action:' before it. Never write "
                    "'Observation:' yourself; the engine adds the tool's result."),
}
_TRUNCATED = {"open": "cut off (the reply ended inside it)", "long": "too long", "deep": "nested too deeply"}


class _Broken(Exception):
    """Internal: the reply broke the format; ``kind`` picks the feedback."""

    def __init__(self, kind: str, **fmt: str):
        super().__init__(kind)
        self.kind, self.fmt = kind, {k: v[:80] for k, v in fmt.items()}


@dataclass(slots=True)
class _Doc:
    """The cleaned reply and its markers; a marker's section runs to the next marker."""

    text: str
    markers: list[Marker]

    def end(self, i: int) -> int:
        return self.markers[i + 1].start if i + 1 < len(self.markers) else len(self.text)

    def section(self, i: int) -> str:
        return self.text[self.markers[i].end : self.end(i)]

    def log(self, i: int) -> str:
        return self.text[: self.end(i)].strip()

    def first(self, kind: str) -> int | None:
        return next((i for i, m in enumerate(self.markers) if m.kind == kind), None)

    def thought(self, i: int) -> str:
        """The last Thought section before marker ``i``, else the prose before it."""
        j = next((j for j in range(i - 1, -1, -1) if self.markers[j].kind == "thought"), None)
        return (self.section(j) if j is not None else self.text[: self.markers[i].start]).strip()


def parse_output(text: str, tool_names: Sequence[str] | None = None) -> Action | Finish:
    """Parse one LLM reply. ``tool_names`` only helps (registered spelling, ``search[...]``)."""
    names = [n for n in tool_names or () if isinstance(n, str)]
    raw = text if isinstance(text, str) else ""
    try:
        return _fast_parse(raw, names) or _parse(raw, names)
    except _Broken as broken:
        problem = _PROBLEMS[broken.kind].format(**broken.fmt)
        feedback = f"{problem} {_FORMAT}"
        if "json" in broken.kind:
            feedback += f"\n{_JSON_FORMAT}"
        if names:
            feedback += f"\nValid tool names: {', '.join(names[:30])}."
        message = f"could not parse the LLM output ({broken.kind}): {problem}"
        raise OutputParserError(message, feedback=feedback, llm_output=raw) from None


def _fast_parse(text: str, names: list[str]) -> Action | Finish | None:
    """The reading of a reply written exactly in the prompt's format, else None: the full rules decide.

    Accepted: lines without ``{`` or a backtick (a ``Thought: ...`` line, prose), then ``Action: <tool>``
    and ``Action Input: <input>``, or ``AI:`` / ``Final Answer:`` and the answer, with no later line that
    could hold a marker in any spelling, no think block, end-of-turn token or stop-word fragment, and a
    tool name without brackets. For such a reply the full rules find exactly these markers, change
    nothing before them and find no JSON action, so this is their reading, built by the same functions.
    """
    m = _FAST_RE.fullmatch(text)
    if m is None or "<" in text and (THINK_RE.search(text) or text.rstrip().endswith(">")):
        return None
    tool, content = m.group("tool", "input")
    if content is None:
        content = m.group("output")
    at = m.start("output" if tool is None else "tool")  # where the marker's content starts
    start = at - (8 if tool is not None else len(m.group("final")) + 1)  # the marker's line
    if text.startswith("Thought: "):
        thought = text[8:start].strip()
    elif start and MAYBE_MARKER_RE.match(text):
        return None  # the first line may be a marker in another spelling
    else:
        thought = text[:start].strip()
    if start and MAYBE_MARKER_LINE_RE.search(text, 0, start) or "\n" in content and (
            MAYBE_MARKER_LINE_RE.search(content) or stop_fragment(text) >= 0):
        return None  # another line may be a marker, or the last one is a stop-word fragment
    try:
        if tool is None:
            answer = content.strip()
            return Finish(answer, thought, text.strip()) if answer else None
        head = tool.strip()
        if head.startswith(("{", "```")) or "(" in head or "[" in head:
            return None  # a JSON action or a call: the full rules read those
        return _result(_clean_tool(head), _clean_input(content), thought, text.strip(), names)
    except _Broken:
        return None


def _parse(text: str, names: list[str]) -> Action | Finish:
    if not text.strip():
        raise _Broken("empty")
    body = unwrap_fence(drop_think(drop_end_tokens(text)))
    body, markers, saw_observation = cut_observation(body, find_markers(body))
    if not body.strip():
        raise _Broken("observation" if saw_observation else "empty")
    doc = _Doc(body, markers)
    action, final = doc.first("action"), doc.first("final")
    stop = min((markers[i].start for i in (action, final) if i is not None), default=len(body))
    hit = _find_json_action(body, stop) or _find_embedded_json_action(body, stop, names)
    if hit is not None:
        prose = FENCE_RE.sub("", MARKER_RE.sub("", body[: hit[0]]))
        return _json_result(hit[2], prose, body[: hit[1]].strip(), names)
    if action is not None and (final is None or action < final):
        return _parse_action(doc, action, names)
    if final is not None:
        return _parse_final(doc, final)
    return _no_action(doc, saw_observation, names)


# --- steps 4-5: read the action or the answer ----------------------------------------


def _parse_action(doc: _Doc, i: int, names: list[str]) -> Action | Finish:
    thought, body = doc.thought(i), doc.section(i).strip()
    head = body.split("\n", 1)[0].strip()
    if head.startswith("{") or head.startswith("```") and _unfence(body).startswith("{"):
        obj = _load_blob(_unfence(body))  # "Action:" followed by a JSON action
        if obj is None:
            raise _Broken("unknown_json")
        return _json_result(obj, thought, doc.log(i), names)
    tool = _clean_tool(head)
    for j in range(i + 1, len(doc.markers)):
        if doc.markers[j].kind in ("action", "final"):
            break
        if doc.markers[j].kind == "input":
            given = _clean_input(doc.section(j))
            call = None if _registered(tool, names) else _call_style(head, names)
            if call is not None:  # "Action: f(x=1)" and an "Action Input:" too: f, with the input given
                return _result(call[0], given if given != "" else call[1], thought, doc.log(j), names)
            return _result(tool, given, thought, doc.log(j), names)
    inline = _INLINE_INPUT_RE.search(body, 0, len(head))  # "Action: search, Action Input: x"
    if inline and inline.start() > 0 and body[inline.start() - 1] in " \t,;|\u00a0":
        tool_text = body[: inline.start()].rstrip(" \t,;|\u00a0")
        return _result(_clean_tool(tool_text), _clean_input(body[inline.end() :]), thought, doc.log(i), names)
    raw_name, colon, _ = head.replace("：", ":").partition(":")
    name, answer = _clean_tool(raw_name), body[len(raw_name) + 1 :].strip()  # the answer may span lines
    if colon and _is_finish(name):  # "Action: Final Answer: x"
        return _result(name, answer, thought, doc.log(i), names)
    if colon and answer and _registered(name, names) and not _registered(tool, names):
        return _result(name, answer, thought, doc.log(i), names)  # "Action: search: x"
    call = _call_style(body, names)
    if call is not None:
        return _result(call[0], call[1], thought, doc.log(i), names)
    for j in range(i - 1, -1, -1):  # "Action Input: x" written before "Action: search"
        if doc.markers[j].kind in ("action", "final"):
            break
        if doc.markers[j].kind == "input":
            return _result(tool, _clean_input(doc.section(j)), thought, doc.log(i), names)
    raise _Broken("no_tool" if tool.lower() in _NO_TOOL else "missing_input", tool=tool)


def _result(tool: str, tool_input: str | dict[str, Any], thought: str, log: str, names: list[str]) -> Action | Finish:
    if _squash(tool) in _FINISH_CALLS and not _registered(tool, names):  # ReAct's Finish[x], finish(answer=x)
        if isinstance(tool_input, dict):
            tool_input = next((v for k, v in tool_input.items() if _squash(str(k)) in _ANSWER_KEYS),
                              next(iter(tool_input.values()), ""))
        tool = FINISH_TOOL_NAMES[0]
    if _is_finish(tool):
        if isinstance(tool_input, dict) and len(tool_input) == 1:  # final_answer(answer=x), its one argument
            key, value = next(iter(tool_input.items()))
            tool_input = value if isinstance(value, str) and _squash(str(key)) in _ANSWER_KEYS else tool_input
        output = tool_input if isinstance(tool_input, str) else json.dumps(tool_input, ensure_ascii=False)
        if not output.strip():
            raise _Broken("empty_answer")
        return Finish(output.strip(), thought, log)
    if tool.lower() in _NO_TOOL:
        raise _Broken("no_tool", tool=tool)
    return Action(_resolve(tool, names), tool_input, thought, log)


def _parse_final(doc: _Doc, i: int) -> Finish:
    """The answer runs to the end (Observation is already cut) or to a later Action line."""
    later = (m.start for m in doc.markers[i + 1 :] if m.kind in ("action", "input"))
    end = next(later, len(doc.text))
    output = doc.text[doc.markers[i].end : end].strip()
    if not output:
        raise _Broken("empty_answer")
    return Finish(output, doc.thought(i), doc.text[:end].strip())


def _no_action(doc: _Doc, saw_observation: bool, names: list[str]) -> Action | Finish:
    """No Action / AI marker and no JSON action: a final-answer call, an error, or an implicit answer."""
    text = doc.text
    if doc.first("input") is not None:
        raise _Broken("missing_action")
    blob = _unfence(text)
    if blob.startswith("{") and _load_blob(blob) is not None:
        raise _Broken("unknown_json")
    call = _final_call(text, names)
    if call is not None:
        prose = FENCE_RE.sub("", MARKER_RE.sub("", text[: call[0]])).strip()
        return _result(call[1], call[2], prose, text.strip(), names)
    need = _need_tool(text)
    if need is not None:  # after "...? No" an answer that lacks its "AI:" prefix is accepted
        nl = text.find("\n", need.end())
        rest = text[nl + 1 :].strip() if nl >= 0 else ""
        if need.group(1).lower() == "yes":
            raise _Broken("said_yes")
        if not rest or any(m.start >= nl for m in doc.markers):
            raise _Broken("no_answer")
        return Finish(rest, MARKER_RE.sub("", text[:nl]).strip(), text.strip())
    if doc.markers or saw_observation:
        raise _Broken("thought_only" if doc.markers else "observation")
    return Finish(text.strip(), "", text.strip())


def _need_tool(text: str) -> re.Match[str] | None:
    """The first "Do I need to use a tool? Yes/No" that starts a line (after markdown) or follows a Thought
    marker that starts its line; the question quoted inside a sentence is prose."""
    line, scanned, lead = 0, 0, None
    for m in _NEED_TOOL_RE.finditer(text):
        nl = text.rfind("\n", scanned, m.start())  # each character is looked at once: linear
        scanned = m.start()
        if nl >= 0 or lead is None:
            line = nl + 1 if nl >= 0 else line
            lead = _NEED_LEAD_RE.match(text, line)
        if lead is not None and (lead.end() == m.start() or lead.group("thought") and lead.end() <= m.start()):
            return m
    return None


def _final_call(text: str, names: list[str]) -> tuple[int, str, str | dict[str, Any]] | None:
    """``finish(answer="x")`` or ``final_answer("x")`` written without ``Action:`` as the reply's last
    line(s), alone or alone in a closing code block: (start, tool, input). Code that merely defines or
    calls such a function among other lines, or a registered tool of that name, is not it."""
    for m in islice(_FINAL_CALL_RE.finditer(text), _MAX_JSON_TRIES):
        if _registered(m.group("name"), names):
            continue
        end = len(text)
        for ostart, oend, cstart, cend, _ in fence_blocks(text):
            if ostart < m.start() < cstart:
                if text[oend : m.start()].strip() or text[cend:].strip():
                    return None  # the call shares its code block with other code, or text follows
                end = cstart
        call = _call_style(text[m.start() : end].strip(), names)
        if call is not None:
            return m.start(), call[0], call[1]
    return None


# --- JSON and Python-literal objects -------------------------------------------------


def _find_json_action(text: str, stop: int) -> tuple[int, int, dict[str, Any]] | None:
    """The first line-start object before ``stop`` that reads as an action: (start, end, obj)."""
    for m in islice(_JSON_START_RE.finditer(text, 0, stop), _MAX_JSON_TRIES):
        start = m.end() - 1
        status, end = _scan_object(text, start)
        obj = _load_object(text[start:end]) if status == "ok" else None
        if obj is not None and _json_shape(obj) is not None:
            return start, end, obj
    return None


def _find_embedded_json_action(text: str, stop: int, names: list[str]) -> tuple[int, int, dict[str, Any]] | None:
    """A complete JSON action inside a line of prose ("Sure! {"tool": {"name": "search", ...}}") before
    ``stop``. With ``names`` it must name a registered tool or the final-answer tool; without, it must be
    one of the two forms the prompts name, input included. So an answer that quotes JSON stays an answer."""
    for m in islice(_EMBEDDED_JSON_RE.finditer(text, 0, stop), _MAX_JSON_TRIES):
        start = m.start()
        status, end = _scan_object(text, start)
        obj = _load_object(text[start:end]) if status == "ok" else None
        shape = _json_shape(obj) if obj is not None else None
        if obj is None or shape is None:
            continue
        if _registered(shape[0], names) or _is_finish(shape[0]) or not names and _spelled_out(obj):
            return start, end, obj
    return None


def _spelled_out(obj: dict[str, Any]) -> bool:
    """``{"action": ..., "action_input": ...}`` or ``{"tool": {"name": ..., "input": ...}}``, a name and
    an input both present: an object whose keys alone say it is an action."""
    obj = _plain_keys(obj)
    tool = obj.get("tool")
    if isinstance(tool, dict):
        tool = _plain_keys(tool)
        return isinstance(tool.get("name"), str) and "input" in tool
    return isinstance(obj.get("action"), str) and "action_input" in obj


def _scan_object(text: str, start: int) -> tuple[str, int]:
    """Find the end of the bracketed object at ``text[start]``: ok | open | deep | bad | long."""
    return scan_bracketed(text, start, max_chars=_MAX_OBJECT, max_depth=_MAX_DEPTH)


def _load_object(s: str) -> dict[str, Any] | None:
    """The object ``s`` holds (JSON, repaired JSON or a bounded Python literal; never eval), or None."""
    obj = loads_lenient(s, max_literal=_MAX_LITERAL)
    return obj if isinstance(obj, dict) else None


def _load_blob(blob: str) -> dict[str, Any] | None:
    """Load the object at the start of ``blob``; a cut-off one is an error, a malformed one None."""
    status, end = _scan_object(blob, 0)
    if status in _TRUNCATED:
        raise _Broken("truncated_json", detail=_TRUNCATED[status])
    return _load_object(blob[:end]) if status == "ok" else None


def _json_shape(obj: dict[str, Any], wrapped: bool = False) -> tuple[str, object, str] | None:
    """(tool, input, thought) of a JSON action, input ``...`` when missing; None: not an action."""
    obj = _plain_keys(obj)  # "Action Input", "action-input" → "action_input"
    if len(obj) == 1 and not wrapped:  # {"tool_call": {"action": ..., "action_input": ...}}
        key, inner = next(iter(obj.items()))
        if key in _WRAPPERS and isinstance(inner, dict):
            return _json_shape(inner, True)
    thought = obj.get("thought") or obj.get("thoughts") or ""
    if isinstance(thought, dict):  # chatgpt-tool-hub: {"thoughts": {"text": ...}}
        thought = thought.get("text") or thought.get("reasoning") or ""
    tool: object = obj.get("action")
    keys: tuple[str, ...] = ("action_input", "actioninput", "tool_input", "input", "arguments")
    if isinstance(obj.get("tool"), dict):  # chatgpt-tool-hub: {"tool": {"name": ..., "input": ...}}
        obj = _plain_keys(obj["tool"])
        tool, keys = obj.get("name"), ("input", "arguments", "args")
    elif tool is None and isinstance(obj.get("tool"), str):
        tool, keys = obj["tool"], ("tool_input", "input", "arguments", "args")
    elif tool is None and ("arguments" in obj or "parameters" in obj):  # function-call style
        tool, keys = obj.get("name"), ("arguments", "parameters")
    if not isinstance(tool, str):
        return None
    thought = thought.strip() if isinstance(thought, str) else ""
    return tool.strip(), next((obj[k] for k in keys if k in obj), ...), thought


def _plain_keys(obj: dict[str, Any]) -> dict[str, Any]:
    return {_SEPARATORS_RE.sub("_", str(k).strip().lower()): v for k, v in obj.items()}


def _json_result(obj: dict[str, Any], prose: str, log: str, names: list[str]) -> Action | Finish:
    shape = _json_shape(obj)
    if shape is None:
        raise _Broken("unknown_json")
    tool, value, thought = shape
    if value is ...:
        raise _Broken("json_no_input", tool=tool)
    if isinstance(value, str):  # OpenAI-style arguments arrive as a JSON string
        value = value.strip()
        loaded = _load_object(value) if value.startswith("{") and len(value) <= _MAX_OBJECT else None
        value = value if loaded is None else loaded
    elif not isinstance(value, dict):
        value = "" if value is None else json.dumps(value, ensure_ascii=False)
    return _result(tool, value, thought or prose.strip(), log, names)


# --- tool names and inputs -------------------------------------------------------------


def _clean_tool(s: str) -> str:
    """The tool name without quotes, bold, zero-width characters, markdown escapes (``my\\_tool``) or a
    trailing period/comma."""
    s = (_MD_ESCAPE_RE.sub(r"\1", s.strip()) if "\\" in s else s.strip()).strip("`'\"*“”‘’\u200b\u200c\u200d\u2060\ufeff").strip()
    if s[:1] + s[-1:] in ("[]", "<>") and not any(c in s[1:-1] for c in "[]<>"):
        s = s[1:-1].strip()  # "Action: [search]", copied from "one of [tools]" or "<tool name>"
    return s.rstrip(".,;:。，；：").strip() or s


@functools.lru_cache(maxsize=1024)  # tool names recur from reply to reply
def _squash(name: str) -> str:
    return _SEPARATORS_RE.sub("", name.lower())


_FINISH_KEYS = frozenset(_squash(n) for n in FINISH_TOOL_NAMES)


def _is_finish(tool: str) -> bool:
    return _squash(tool) in _FINISH_KEYS


def _registered(tool: str, names: list[str]) -> bool:
    return bool(tool) and any(_squash(n) == _squash(tool) for n in names)


def _resolve(tool: str, names: list[str]) -> str:
    """The registered spelling of ``tool`` when one matches loosely; else ``tool`` itself."""
    if tool in names or not names:
        return tool  # registered as written: the loop below would find it first too
    for key in (str.lower, _squash):
        wanted = key(tool)
        found = [n for n in names if key(n) == wanted]
        if found:
            return tool if tool in found else found[0]
    return tool


def _call_style(body: str, names: list[str]) -> tuple[str, str | dict[str, Any]] | None:
    """``search[weather]`` (ReAct paper) or ``search("weather")`` (function call)."""
    cut = [i for i in (body.find("["), body.find("(")) if 0 < i <= 100]
    if not cut or any(_squash(n) == _squash(_clean_tool(body)) for n in names):
        return None  # no brackets, or a registered name that happens to contain them
    opener = min(cut)
    closer = "]" if body[opener] == "[" else ")"
    tool = _clean_tool(body[:opener])
    if not tool or "\n" in tool or not body.endswith(closer):
        return None
    inner = body[opener + 1 : -1].strip()
    return tool, (call_arguments(inner, _MAX_LITERAL) if closer == ")" else strip_quotes(inner))


def _unfence(s: str) -> str:
    """The content of a leading ``` block (the first one), else ``s``; both stripped."""
    s = s.strip()
    if not s.startswith("```"):
        return s
    nl = s.find("\n")
    if nl < 0:
        return s.strip("`").strip()
    close = s.find("\n```", nl)
    return s[nl + 1 : close if close >= 0 else len(s)].strip("\n").rstrip()


def _clean_input(section: str) -> str | dict[str, Any]:
    """Verbatim input minus surrounding whitespace, a fence and matching quotes; objects → dict."""
    s = _unfence(section)
    if not s.startswith("{"):
        return strip_quotes(s)
    status, end = _scan_object(s, 0)
    if status != "ok":
        _load_blob(s)  # raises for a cut-off object; a malformed one stays text
        return s
    rest = s[end:].lstrip(" \t")
    if end == len(s) or rest[:1] in ("\n", "\r") and rest.lstrip()[:1] not in ("{", "[", ","):
        obj = _load_object(s[:end])  # the object, even with chatter on the lines after it
        return s if obj is None else obj
    return s
