"""The markers of a ReAct reply: steps 1-3 of :mod:`chatgpt_tool_hub.engine.parser`.

Drop end-of-turn tokens and ``<think>`` blocks, unwrap a plain ``` fence around the reply, find the
line-anchored ``Thought`` / ``Action`` / ``Action Input`` / ``Final Answer`` / ``AI`` / ``Observation``
markers outside code fences (any case, ``:`` or ``：``, odd spaces, markdown, numbers, the Chinese
markers), and cut the reply at a hallucinated observation. Every step is linear in the input.
"""

from __future__ import annotations

import bisect
import re
from typing import NamedTuple

__all__ = ["SPACE", "LEAD", "MARKER_RE", "MAYBE_MARKER_RE", "MAYBE_MARKER_LINE_RE", "FENCE_RE", "THINK_RE",
           "Marker", "drop_end_tokens", "drop_think", "fence_blocks", "unwrap_fence", "find_markers",
           "cut_observation", "stop_fragment"]

SPACE = "[ \t\u00a0\u1680\u2000-\u200d\u202f\u205f\u2060\u3000\ufeff]"  # spaces, NBSP, zero-width, BOM
LEAD = (  # what may start a line before a marker: spaces, a markdown header or list item, bold
    rf"^{SPACE}*(?:(?:(?P<hdr>#{{1,6}})|(?P<lst>[-*+•]|\d{{1,3}}[.)])){SPACE}+)?(?:(?:\*\*|__){SPACE}*|[*_](?=\w))?")
MARKER_RE = re.compile(  # no two adjacent quantifiers over the same characters: linear time
    rf"{LEAD}(?P<kw>thoughts?|action(?:{SPACE}|_)*input|action|final(?:{SPACE}|_)*answer|ai|observations?"
    r"|思考|行动输入|动作输入|行动|动作|最终答案|最终回答|观察结果|观察)"
    rf"(?:{SPACE}*#?\d{{1,3}})?(?:{SPACE}*(?:\*\*?|__?))?{SPACE}*(?:(?P<colon>[:：])(?:(?:\*\*?|__?)(?!\S))?|(?=\r?$))",
    re.IGNORECASE | re.MULTILINE,
)
_MAYBE_KW = (  # what may start a marker's line, loosely: every line MARKER_RE matches matches this
    rf"[{SPACE[1:-1]}#*+•\-\d.)_]*(?:thought|action|final|ai|observation|思考|行动|动作|最终|观察)")
MAYBE_MARKER_RE = re.compile(_MAYBE_KW, re.IGNORECASE)
MAYBE_MARKER_LINE_RE = re.compile(rf"\n{_MAYBE_KW}", re.IGNORECASE)
_KW_SEP_RE = re.compile(f"(?:{SPACE}|_)+")
_KINDS = {"thought": "thought", "thoughts": "thought", "actioninput": "input", "action": "action",
          "finalanswer": "final", "ai": "final", "observation": "observation", "observations": "observation",
          "思考": "thought", "行动输入": "input", "动作输入": "input", "行动": "action", "动作": "action",
          "最终答案": "final", "最终回答": "final", "观察": "observation", "观察结果": "observation"}
_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end_of_text|>", "<|end|>",
               "<end_of_turn>", "<eos>")
FENCE_RE = re.compile(r"^[ \t]*```(?P<tag>[^\n`]*)$", re.MULTILINE)
THINK_RE = re.compile(r"<(/?)think(?:ing)?>", re.IGNORECASE)
_WRAPPER_TAGS = {"", "text", "txt", "markdown", "md", "plaintext"}


class Marker(NamedTuple):  # a tuple: built for every marker of every reply
    kind: str  # thought | action | input | final | observation
    start: int  # start of the marker's line
    end: int  # start of its content
    weak: bool = False  # a list item or a Chinese marker: counts only in a reply that uses them


def drop_end_tokens(text: str) -> str:
    """Drop chat-template end-of-turn tokens a local server leaked at the very end of the reply."""
    end, cut = len(text), False
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        tok = next((t for t in _END_TOKENS if text.endswith(t, 0, end)), None)
        if tok is None and text.endswith("</s>", 0, end) and (end == 4 or text[end - 5].isspace()):
            tok = "</s>"  # "<s>x</s>" is markup, kept
        if tok is None:
            return text[:end] if cut else text
        end, cut = end - len(tok), True


def drop_think(text: str) -> str:
    """Remove <think> blocks; an unclosed one runs to the end, a lone closer drops what precedes it."""
    keep, pos, opened = [], 0, False
    for m in THINK_RE.finditer(text):
        if not m.group(1) and not opened:
            keep.append(text[pos : m.start()])
            opened = True
        elif m.group(1) and (opened or not keep):  # not keep: "...</think>", opener in the prompt
            pos, opened = m.end(), False
    if not opened:
        keep.append(text[pos:])
    return "".join(keep)


def fence_blocks(text: str) -> list[tuple[int, int, int, int, str]]:
    """Pair ``` lines: (open start, open end, close start, close end, tag); unclosed runs to the end."""
    blocks: list[tuple[int, int, int, int, str]] = []
    stack: list[tuple[re.Match[str], str]] = []
    for m in FENCE_RE.finditer(text):
        tag = m.group("tag").strip().lower()
        if tag or not stack:
            stack.append((m, tag))
        else:
            opener, otag = stack.pop()
            blocks.append((opener.start(), opener.end(), m.start(), m.end(), otag))
    blocks.extend((o.start(), o.end(), len(text), len(text), tag) for o, tag in stack)
    return sorted(blocks)


def unwrap_fence(text: str) -> str:
    """Remove the fence lines of a plain ``` block that wraps the reply's first marker."""
    first = next((m for m in MARKER_RE.finditer(text) if _kind(m)), None)
    if first is None:
        return text
    for ostart, oend, cstart, cend, tag in fence_blocks(text):
        if ostart > first.start():
            break
        if tag in _WRAPPER_TAGS and oend <= first.start() < cstart:
            return text[:ostart] + text[oend + 1 : cstart] + text[cend + 1 :]
    return text


def find_markers(text: str) -> list[Marker]:
    """Line-anchored markers that are not inside a code fence."""
    spans: list[tuple[int, int]] = []
    for ostart, _, _, cend, _ in fence_blocks(text):
        if spans and ostart <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], cend))
        else:
            spans.append((ostart, cend))
    starts, markers = [s for s, _ in spans], []
    for m in MARKER_RE.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1
        kind = _kind(m) if k < 0 or m.start() >= spans[k][1] else None
        if kind:
            weak = bool(m.group("lst")) or not m.group("kw").isascii()
            markers.append(Marker(kind, m.start(), m.end(), weak))
    pairs = zip(markers, markers[1:], strict=False)
    if not any(m.weak and m.kind == "final" for m in markers) and not any(
            a.kind == "action" and b.kind == "input" and (a.weak or b.weak) for a, b in pairs):
        markers = [m for m in markers if not m.weak]  # "- Action: Bob to follow up" is a note
    return markers


def _kind(m: re.Match[str]) -> str | None:
    """The kind of a marker match; None for a colon-less word other than Final Answer, or '# AI:'."""
    key = _KW_SEP_RE.sub("", m.group("kw").lower())
    if m.group("colon") is None and key != "finalanswer":
        return None
    if key == "ai" and (m.group("hdr") or m.group("lst")):
        return None  # "# AI: Threat or Promise" is a title
    return _KINDS[key]


def cut_observation(text: str, markers: list[Marker]) -> tuple[str, list[Marker], bool]:
    """Cut at the first Observation marker, then at a trailing 'Obs'-like stop-word fragment."""
    for i, m in enumerate(markers):
        if m.kind == "observation":
            return text[: m.start], markers[:i], True
    nl = stop_fragment(text)
    if nl >= 0:
        return text[:nl], [m for m in markers if m.start < nl], False
    return text, markers, False


def stop_fragment(text: str) -> int:
    """Where a last line that is a stop-word fragment ('Obs', '**Observ:') begins (its line break), or -1."""
    nl = text.rstrip().rfind("\n")
    tail = text[nl + 1 :].strip().strip("*").rstrip(":：").lower()
    return nl if nl >= 0 and len(tail) >= 3 and "observation".startswith(tail) else -1


