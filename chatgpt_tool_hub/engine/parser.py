"""Read an LLM's ReAct reply as an :class:`Action` or a :class:`Finish`.

The pipeline, one small function per step:

1. **Drop think blocks** — ``<think>…</think>`` is removed (also an unclosed
   ``<think>`` and a lone leading ``</think>``); nothing inside is ever an action.
2. **Normalise markers** — line-anchored ``Thought`` / ``Action`` / ``Action Input``
   / ``Final Answer`` / ``AI`` / ``Observation`` are found in any case, with ``:``
   or ``：``, spaces before the colon, markdown bold and numbers (``Action 1:``).
   A bare ``` fence wrapping the whole reply is markup and its fence lines go;
   other fences are code, and markers inside them are ignored. Only markers are
   normalised: the text between them is kept verbatim.
3. **Cut at observation** — everything from the first line-anchored
   ``Observation:`` (the LLM hallucinating the tool's result) and a trailing
   stop-word fragment such as ``Obs`` is dropped.
4. **Locate** the first action, final answer or JSON action; the earliest wins.
5. **Extract** the tool and its input (``search[x]``, ``search("x")``, fenced code,
   JSON or Python-literal dict, matching quotes stripped) or the final answer.

What cannot be recovered raises :class:`OutputParserError`; its ``feedback``
tells the LLM which part of the format it broke. Every step is linear in the
input; JSON and literal parsing are bounded in size and depth.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass
from typing import Sequence

from chatgpt_tool_hub.errors import OutputParserError

__all__ = ["Action", "Finish", "parse_output", "FINAL_PREFIXES", "FINISH_TOOL_NAMES"]

FINAL_PREFIXES = ("AI", "Final Answer")
"""Prefixes of the final answer; the prompts ask for the first."""

FINISH_TOOL_NAMES = ("answer-user", "answer_user", "final answer", "final_answer", "final-answer")
"""Tool names that mean "answer the user" (compared case-insensitively)."""


@dataclass(frozen=True)
class Action:
    """The LLM asks to run ``tool`` with ``tool_input``; ``log`` is the text used."""

    tool: str
    tool_input: str | dict
    thought: str = ""
    log: str = ""


@dataclass(frozen=True)
class Finish:
    """The LLM answers the user with ``output``; ``log`` is the text used."""

    output: str
    thought: str = ""
    log: str = ""


@dataclass(frozen=True)
class _Marker:
    kind: str  # thought | action | input | final | observation
    start: int  # start of the marker's line
    end: int  # start of its content


_MAX_OBJECT = 200_000  # characters scanned for one {...} object
_MAX_DEPTH = 100  # nesting accepted before json / ast.literal_eval are tried
_MAX_LITERAL = 20_000  # characters handed to ast at most
_MAX_JSON_TRIES = 10  # line-start "{" candidates tried per reply

_MARKER_RE = re.compile(
    r"^[ \t]*(?:(?:\*\*|__)[ \t]*)?"
    r"(?P<kw>thoughts?|action[ \t_]*input|action|final[ \t_]*answer|ai|observation)"
    r"(?:[ \t]*#?\d{1,3})?(?:[ \t]*(?:\*\*|__))?[ \t]*[:：](?:\*\*|__)?",
    re.IGNORECASE | re.MULTILINE,
)
_FENCE_RE = re.compile(r"^[ \t]*```(?P<tag>[^\n`]*)$", re.MULTILINE)
_THINK_RE = re.compile(r"<(/?)think(?:ing)?>", re.IGNORECASE)
_NEED_TOOL_RE = re.compile(r"do i need to use a tool\s*\?\s*(yes|no)\b", re.IGNORECASE)
_JSON_START_RE = re.compile(r"^[ \t]*\{", re.MULTILINE)
_OBJECT_TOKEN_RE = re.compile(r"[{}\[\]\"'\\]")
_WRAPPER_TAGS = {"", "text", "txt", "markdown", "md", "plaintext", "react"}
_NO_TOOL = {"", "none", "n/a", "na", "null", "nil", "no", "nothing", "no tool", "-"}
_QUOTES = {'"': '"', "'": "'", "`": "`", "“": "”", "‘": "’"}
_KINDS = {"thought": "thought", "thoughts": "thought", "actioninput": "input", "action": "action",
          "finalanswer": "final", "ai": "final", "observation": "observation"}

_FORMAT = ("Reply in exactly this format:\n"
           "Thought: Do I need to use a tool? Yes\nAction: <one tool name>\nAction Input: <the input>\n"
           "or, when you can answer:\nThought: Do I need to use a tool? No\nAI: <your answer>")
_JSON_FORMAT = ('Or send one JSON object: {"action": "<one tool name>", "action_input": "<the input>"}.')
_PROBLEMS = {
    "empty": "Your reply was empty.",
    "missing_input": "Your reply had 'Action: {tool}' but no 'Action Input:' line.",
    "missing_action": "Your reply had 'Action Input:' but no 'Action:' line naming the tool.",
    "said_yes": "You wrote 'Do I need to use a tool? Yes' but no 'Action:' line naming the tool.",
    "thought_only": "Your reply had 'Thought:' but neither an 'Action:' line nor an 'AI:' line.",
    "no_answer": "You wrote 'Do I need to use a tool? No' but no 'AI:' line with your answer.",
    "empty_answer": "Your reply had 'AI:' (or 'Final Answer:') but no answer after it.",
    "no_tool": ("Your reply had 'Action: {tool}', which is not a tool. 'Action:' must name exactly one "
                "tool; when you need none, answer with 'AI:' instead."),
    "truncated_json": ("Your reply has a JSON object that is cut off or never closed ({detail}). "
                       "Send the complete object with every brace and quote closed."),
    "unknown_json": ('Your reply was a JSON object but not an action: it needs an "action" key naming '
                     'the tool and an "action_input" key.'),
    "json_no_input": 'Your JSON action named "{tool}" but had no "action_input" key.',
    "observation": ("Your reply contained 'Observation:' but no 'Action:' before it. Never write "
                    "'Observation:' yourself; the engine adds the tool's result."),
}


def parse_output(text: str, tool_names: Sequence[str] | None = None) -> Action | Finish:
    """Parse one LLM reply. ``tool_names`` only helps (spelling, ``search[...]``)."""
    names = [n for n in tool_names or () if isinstance(n, str)]
    if not isinstance(text, str) or not text.strip():
        raise _fail("empty", text if isinstance(text, str) else "", names)
    body = _unwrap_fence(_drop_think(text))
    markers, _ = _scan(body)
    body, markers, saw_observation = _cut_observation(body, markers)
    if not body.strip():
        raise _fail("observation" if saw_observation else "empty", text, names)
    action = next((i for i, m in enumerate(markers) if m.kind == "action"), None)
    final = next((i for i, m in enumerate(markers) if m.kind == "final"), None)
    stop = min((markers[i].start for i in (action, final) if i is not None), default=len(body))
    hit = _find_json_action(body, stop)
    if hit is not None:
        prose = _MARKER_RE.sub("", body[: hit[0]])
        return _json_result(hit[2], prose, body[: hit[1]].strip(), names, text)
    if action is not None and (final is None or action < final):
        return _parse_action(body, markers, action, names, text)
    if final is not None:
        return _parse_final(body, markers, final, text, names)
    return _no_action(body, markers, saw_observation, names, text)


# --- steps 1-3: clean the text -----------------------------------------------------


def _drop_think(text: str) -> str:
    """Remove <think> blocks; an unclosed one runs to the end, a lone closer drops what precedes it."""
    keep, pos, opened = [], 0, None
    for m in _THINK_RE.finditer(text):
        closing = bool(m.group(1))
        if not closing and opened is None:
            keep.append(text[pos : m.start()])
            opened = m
        elif closing and opened is not None:
            pos, opened = m.end(), None
        elif closing and not keep:  # "...reasoning</think>" with the opener in the prompt
            pos = m.end()
    if opened is None:
        keep.append(text[pos:])
    return "".join(keep)


def _fence_blocks(text: str) -> list[tuple[int, int, int, int, str]]:
    """Pair ``` lines: (open start, open end, close start, close end, tag); unclosed runs to the end."""
    blocks, stack = [], []
    for m in _FENCE_RE.finditer(text):
        tag = m.group("tag").strip().lower()
        if tag or not stack:
            stack.append((m, tag))
        else:
            opener, otag = stack.pop()
            blocks.append((opener.start(), opener.end(), m.start(), m.end(), otag))
    blocks.extend((o.start(), o.end(), len(text), len(text), tag) for o, tag in stack)
    return sorted(blocks)


def _unwrap_fence(text: str) -> str:
    """Remove the fence lines of a plain ``` block that wraps the reply's first marker."""
    first = _MARKER_RE.search(text)
    if first is None:
        return text
    for ostart, oend, cstart, cend, tag in _fence_blocks(text):
        if ostart > first.start():
            break
        if tag in _WRAPPER_TAGS and oend <= first.start() < cstart:
            closing = text[cend + 1 :] if cstart < len(text) else ""
            return text[:ostart] + text[oend + 1 : cstart] + closing
    return text


def _scan(text: str) -> tuple[list[_Marker], list[tuple[int, int]]]:
    """Line-anchored markers outside code fences, and the merged code spans."""
    spans: list[tuple[int, int]] = []
    for ostart, _, _, cend, _ in _fence_blocks(text):
        if spans and ostart <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], cend))
        else:
            spans.append((ostart, cend))
    starts = [s for s, _ in spans]
    markers = []
    for m in _MARKER_RE.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1
        if k < 0 or m.start() >= spans[k][1]:
            kind = _KINDS[re.sub(r"[ \t_]", "", m.group("kw").lower())]
            markers.append(_Marker(kind, m.start(), m.end()))
    return markers, spans


def _cut_observation(text: str, markers: list[_Marker]) -> tuple[str, list[_Marker], bool]:
    """Cut at the first Observation marker, then at a trailing 'Obs'-like stop-word fragment."""
    for i, m in enumerate(markers):
        if m.kind == "observation":
            return text[: m.start], markers[:i], True
    nl = text.rstrip().rfind("\n")
    tail = text[nl + 1 :].strip().strip("*").rstrip(":：").lower()
    if nl >= 0 and len(tail) >= 3 and "observation".startswith(tail):
        return text[:nl], [m for m in markers if m.start < nl], False
    return text, markers, False


# --- steps 4-5: read the action or the answer ----------------------------------------


def _section(text: str, markers: list[_Marker], i: int) -> str:
    end = markers[i + 1].start if i + 1 < len(markers) else len(text)
    return text[markers[i].end : end]


def _thought(text: str, markers: list[_Marker], i: int) -> str:
    """The last Thought section before marker ``i``, else the prose before it."""
    for j in range(i - 1, -1, -1):
        if markers[j].kind == "thought":
            return _section(text, markers, j).strip()
    return text[: markers[i].start].strip() if i < len(markers) else ""


def _parse_action(text, markers, i, names, raw) -> Action | Finish:
    thought = _thought(text, markers, i)
    body = _section(text, markers, i).strip()
    head = body.split("\n", 1)[0].strip()
    if head.startswith("{") or head.startswith("```") and _unfence(body).startswith("{"):
        obj = _load_blob(_unfence(body), raw, names)
        if obj is None:
            raise _fail("unknown_json", raw, names)
        return _json_result(obj, thought, text[: _section_end(text, markers, i)].strip(), names, raw)
    tool = _clean_tool(head)
    for j in range(i + 1, len(markers)):
        if markers[j].kind in ("action", "final"):
            break
        if markers[j].kind == "input":
            log = text[: _section_end(text, markers, j)].strip()
            return _result(tool, _clean_input(_section(text, markers, j), raw, names), thought, log, names, raw)
    call = _call_style(body, names)
    if call is not None:
        log = text[: _section_end(text, markers, i)].strip()
        return _result(call[0], call[1], thought, log, names, raw)
    if tool.lower() in _NO_TOOL:
        raise _fail("no_tool", raw, names, tool=tool)
    raise _fail("missing_input", raw, names, tool=tool)


def _section_end(text: str, markers: list[_Marker], i: int) -> int:
    return markers[i + 1].start if i + 1 < len(markers) else len(text)


def _result(tool: str, tool_input, thought: str, log: str, names, raw) -> Action | Finish:
    if _is_finish(tool):
        output = tool_input if isinstance(tool_input, str) else json.dumps(tool_input, ensure_ascii=False)
        return Finish(output.strip(), thought, log)
    if tool.lower() in _NO_TOOL:
        raise _fail("no_tool", raw, names, tool=tool)
    return Action(_resolve(tool, names), tool_input, thought, log)


def _parse_final(text, markers, i, raw, names) -> Finish:
    end = next((m.start for m in markers[i + 1 :] if m.kind in ("action", "input")), len(text))
    output = text[markers[i].end : end].strip()
    if not output:
        raise _fail("empty_answer", raw, names)
    return Finish(output, _thought(text, markers, i), text[:end].strip())


def _no_action(text, markers, saw_observation, names, raw) -> Action | Finish:
    """No Action / AI marker and no JSON action: an error, or an implicit final answer."""
    if any(m.kind == "input" for m in markers):
        raise _fail("missing_action", raw, names)
    blob = _unfence(text.strip())
    if blob.startswith("{") and _load_blob(blob, raw, names) is not None:
        raise _fail("unknown_json", raw, names)
    need = _NEED_TOOL_RE.search(text)
    if need is not None and need.group(1).lower() == "yes":
        raise _fail("said_yes", raw, names)
    if need is not None:
        nl = text.find("\n", need.end())
        rest = text[nl + 1 :].strip() if nl >= 0 else ""
        if rest and not any(m.start >= nl for m in markers):
            return Finish(rest, text[: nl].strip(), text.strip())
        raise _fail("no_answer", raw, names)
    if markers:
        raise _fail("thought_only", raw, names)
    if saw_observation:
        raise _fail("observation", raw, names)
    return Finish(text.strip(), "", text.strip())


# --- JSON actions ---------------------------------------------------------------------


def _find_json_action(text: str, stop: int):
    """The first line-start object before ``stop`` that reads as an action: (start, end, obj)."""
    for tries, m in enumerate(_JSON_START_RE.finditer(text, 0, stop)):
        if tries >= _MAX_JSON_TRIES:
            break
        start = m.end() - 1
        status, end = _scan_object(text, start)
        if status == "ok":
            obj = _load_object(text[start:end])
            if obj is not None and _json_shape(obj) is not None:
                return start, end, obj
    return None


def _scan_object(text: str, start: int) -> tuple[str, int]:
    """Find the end of the bracketed object at ``text[start]``: ok | open | deep | bad | long."""
    stack: list[str] = []
    quote, skip_to = "", -1
    limit = min(len(text), start + _MAX_OBJECT)
    for m in _OBJECT_TOKEN_RE.finditer(text, start, limit):
        i, c = m.start(), m.group()
        if i < skip_to:
            continue
        if quote:
            if c == "\\":
                skip_to = i + 2
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
            if len(stack) > _MAX_DEPTH:
                return "deep", i
        elif c in "}]":
            if not stack or stack.pop() != c:
                return "bad", i
            if not stack:
                return "ok", i + 1
    return ("open" if limit == len(text) else "long"), limit


def _load_object(s: str) -> dict | None:
    """json.loads, then ast.literal_eval (bounded; never eval); a dict or None."""
    try:
        obj = json.loads(s, strict=False)
    except (ValueError, RecursionError, MemoryError):
        obj = None
        if len(s) <= _MAX_LITERAL:
            try:
                obj = ast.literal_eval(s)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                obj = None
    return obj if isinstance(obj, dict) else None


def _load_blob(blob: str, raw: str, names) -> dict | None:
    """Load the object at the start of ``blob``; a cut-off object is an error."""
    status, end = _scan_object(blob, 0)
    if status in ("open", "long", "deep"):
        detail = {"open": "the text ended inside it", "long": "it is too long",
                  "deep": "it is nested too deeply"}[status]
        raise _fail("truncated_json", raw, names, detail=detail)
    return _load_object(blob[:end]) if status == "ok" else None


def _json_shape(obj: dict) -> tuple[str, object, str] | None:
    """(tool, input, thought) from a JSON action; input is ``...`` when missing."""
    thought = obj.get("thought") or obj.get("thoughts") or ""
    if isinstance(thought, dict):  # chatgpt-tool-hub: {"thoughts": {"text": ...}}
        thought = thought.get("text") or thought.get("reasoning") or ""
    thought = thought if isinstance(thought, str) else ""
    tool, keys = obj.get("action"), ("action_input", "tool_input", "input", "arguments")
    if isinstance(obj.get("tool"), dict):
        tool, obj, keys = obj["tool"].get("name"), obj["tool"], ("input", "arguments", "args")
    elif tool is None and isinstance(obj.get("tool"), str):
        tool, keys = obj["tool"], ("tool_input", "input", "arguments", "args")
    elif tool is None and ("arguments" in obj or "parameters" in obj):
        tool, keys = obj.get("name"), ("arguments", "parameters")
    if not isinstance(tool, str):
        return None
    return tool.strip(), next((obj[k] for k in keys if k in obj), ...), thought.strip()


def _json_result(obj: dict, prose: str, log: str, names, raw) -> Action | Finish:
    shape = _json_shape(obj)
    if shape is None:
        raise _fail("unknown_json", raw, names)
    tool, value, thought = shape
    if value is ...:
        raise _fail("json_no_input", raw, names, tool=tool)
    if isinstance(value, str):
        value = value.strip()
        loaded = _load_object(value) if value.startswith("{") and len(value) <= _MAX_OBJECT else None
        value = loaded if loaded is not None else value
    elif value is None:
        value = ""
    elif not isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False)
    return _result(tool, value, thought or prose.strip(), log, names, raw)


# --- tool names and inputs -------------------------------------------------------------


def _clean_tool(s: str) -> str:
    return s.strip().strip("`'\"*“”‘’").strip()


def _squash(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name.lower())


def _is_finish(tool: str) -> bool:
    return _squash(tool) in {_squash(n) for n in FINISH_TOOL_NAMES}


def _resolve(tool: str, names: list[str]) -> str:
    """The registered spelling of ``tool`` when one matches loosely; else ``tool`` itself."""
    for key in (str.lower, _squash):
        found = [n for n in names if key(n) == key(tool)]
        if found:
            return tool if tool in found else found[0]
    return tool


def _call_style(body: str, names: list[str]) -> tuple[str, str | dict] | None:
    """``search[weather]`` (ReAct paper) or ``search("weather")`` (function call)."""
    if names and any(_squash(n) == _squash(_clean_tool(body)) for n in names):
        return None
    cut = [i for i in (body.find("["), body.find("(")) if 0 < i <= 100]
    if not cut:
        return None
    opener = min(cut)
    closer = "]" if body[opener] == "[" else ")"
    tool = _clean_tool(body[:opener])
    if not tool or "\n" in tool or not body.endswith(closer):
        return None
    inner = body[opener + 1 : -1].strip()
    if closer == ")":
        return tool, _call_args(inner)
    return tool, _strip_quotes(inner)


def _call_args(inner: str) -> str | dict:
    """A single string literal → the string; keyword literals → a dict; else verbatim."""
    if not inner or len(inner) > _MAX_LITERAL:
        return inner
    errors = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)
    try:
        value = ast.literal_eval(inner)
        if isinstance(value, (str, dict)):
            return value
    except errors:
        pass
    try:
        call = ast.parse(f"f({inner})", mode="eval").body
        if isinstance(call, ast.Call) and not call.args and all(k.arg for k in call.keywords):
            return {k.arg: ast.literal_eval(k.value) for k in call.keywords} or inner
    except errors:
        pass
    return _strip_quotes(inner)


def _unfence(s: str) -> str:
    """The content of a leading ``` block (its first one), else ``s``."""
    s = s.strip()
    if not s.startswith("```"):
        return s
    nl = s.find("\n")
    if nl < 0:
        return s.strip("`").strip()
    close = s.find("\n```", nl)
    return s[nl + 1 : close if close >= 0 else len(s)].strip("\n").rstrip()


def _strip_quotes(s: str) -> str:
    """Strip one pair of quotes only when they match at both ends and none is inside."""
    if len(s) >= 2 and s[0] in _QUOTES and s[-1] == _QUOTES[s[0]]:
        inner = s[1:-1]
        if s[0] not in inner and s[-1] not in inner:
            return inner
    return s


def _clean_input(section: str, raw: str, names) -> str | dict:
    """Verbatim input minus surrounding whitespace, a fence and matching quotes; objects → dict."""
    s = _unfence(section)
    if s.startswith("{"):
        status, end = _scan_object(s, 0)
        if status == "ok" and end == len(s):
            obj = _load_object(s)
            return obj if obj is not None else s
        if status == "ok":
            return s
        _load_blob(s, raw, names)  # raises for a cut-off object
        return s
    return _strip_quotes(s)


def _fail(kind: str, llm_output: str, names: Sequence[str] = (), **fmt: str) -> OutputParserError:
    problem = _PROBLEMS[kind].format(**{k: v[:80] for k, v in fmt.items()})
    feedback = f"{problem} {_FORMAT}"
    if kind in ("unknown_json", "json_no_input", "truncated_json"):
        feedback += f"\n{_JSON_FORMAT}"
    if names:
        shown = ", ".join(list(names)[:30])
        feedback += f"\nValid tool names: {shown}."
    return OutputParserError(f"could not parse the LLM output ({kind}): {problem}",
                             feedback=feedback, llm_output=llm_output)
