"""Map-reduce summaries with an LLM: what the ``summary`` tool and ``url-get`` (``url_get_use_summary``) run.

:func:`summarize` splits a text into segments of at most
``max_segment_length`` tokens (:func:`split_text`: on paragraph, line,
sentence and word boundaries), summarises each segment ("map", up to
``parallel`` calls at once), then combines the partial summaries ("reduce"),
in groups first when they do not fit in one prompt. Text that fits in one
segment takes one LLM call.

Every call is charged to the run's ``budget`` (``charge_llm()``) before it is
made and its token usage appended to the run's ``usage`` (``usage.calls``), so
a summary made inside a tool counts in the run's ``RunResult.usage``.

User text is only ever concatenated to the prompts below, never formatted.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from ..errors import LLMError, RunError, ToolExecutionError
from .base import call_llm
from .tokens import count_tokens, truncate_to_tokens

__all__ = ["summarize", "split_text", "SYSTEM_PROMPT", "SINGLE_PROMPT", "MAP_PROMPT", "COMBINE_PROMPT",
           "SUMMARY_TAIL"]

SYSTEM_PROMPT = (
    "You write faithful, concise summaries. Keep the key facts, names, numbers, dates and conclusions; "
    "never add information that is not in the text. Write in the same language as the text."
)
SINGLE_PROMPT = "Write a concise summary of the following text.\n\nTEXT:\n"
MAP_PROMPT = ("The following is one part of a longer document. Summarise this part concisely, keeping every "
              "fact that may matter for a summary of the whole document.\n\n")
COMBINE_PROMPT = ("The following are summaries of consecutive parts of one document, in order. Combine them "
                  "into one coherent, concise summary of the whole document, without repeating yourself.\n\n")
SUMMARY_TAIL = "\n\nCONCISE SUMMARY:"

_SENTENCES = re.compile(r"[^.!?。！？；]*[.!?。！？；]+[\"'”’)\]]*\s*|[^.!?。！？；]+$")
_MAX_REDUCE_ROUNDS = 4


def summarize(text: str, llm: Any, *, max_segment_length: int = 2500, max_segments: int = 30, parallel: int = 4,
              budget: Any = None, usage: Any = None, notes: list[str] | None = None) -> str:
    """Map-reduce summary of ``text`` with ``llm`` (one call when it fits in one segment).

    ``max_segment_length`` is in tokens (at least 100); past ``max_segments``
    segments only the first ones are summarised and ``notes`` (when given) says
    so. ``budget`` (a ``RunBudget``) and ``usage`` (a ``RunUsage``) are the
    run's: each call is charged and counted. A used-up budget or a failed LLM
    call raises ``ToolExecutionError`` (an observation).
    """
    segment = max(100, int(max_segment_length))
    most = max(1, int(max_segments))
    ask = _Asker(llm, max(1, int(parallel)), budget, usage)
    model = getattr(llm, "model_name", None)
    model = model if isinstance(model, str) and model not in ("scripted", "unknown") else None
    chunks = split_text(text, segment, model)
    if len(chunks) > most:
        if notes is not None:
            notes.append(f"the text was longer than {most} segments of {segment} tokens; only the first {most} "
                         f"were summarised (summary_max_segments)")
        chunks = chunks[:most]
    if len(chunks) <= 1:
        return ask.one(SINGLE_PROMPT + (chunks[0] if chunks else text) + SUMMARY_TAIL)
    total = len(chunks)
    summaries = ask.all([MAP_PROMPT + f"PART {i} OF {total}:\n" + chunk + SUMMARY_TAIL
                         for i, chunk in enumerate(chunks, 1)])
    for _ in range(_MAX_REDUCE_ROUNDS):
        if len(summaries) <= 2 or count_tokens(_join(summaries), model) <= segment:
            break
        # the partial summaries do not fit in one prompt: combine them in groups first
        summaries = ask.all([COMBINE_PROMPT + _join(g) + SUMMARY_TAIL for g in _groups(summaries, segment, model)])
    return ask.one(COMBINE_PROMPT + _join(summaries) + SUMMARY_TAIL)


class _Asker:
    """One summary prompt → one LLM call, charged to the run's budget and counted in its usage."""

    def __init__(self, llm: Any, parallel: int, budget: Any, usage: Any):
        self.llm, self.parallel, self.budget, self.usage = llm, parallel, budget, usage

    def one(self, prompt: str) -> str:
        if self.budget is not None:
            try:
                self.budget.charge_llm()
            except RunError as exc:
                raise ToolExecutionError(f"stopped summarising: {exc}") from None
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
        try:
            response = call_llm(self.llm, messages)
        except LLMError as exc:
            raise ToolExecutionError(f"the LLM failed while summarising: {exc}") from None
        if self.usage is not None:
            self.usage.calls.append(response.usage)  # counted in the run's RunResult.usage
        text = response.text
        return ("" if text is None else str(text)).strip() or "(the LLM returned an empty summary)"

    def all(self, prompts: Sequence[str]) -> list[str]:
        if self.parallel <= 1 or len(prompts) <= 1:
            return [self.one(p) for p in prompts]
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(prompts))) as pool:
            return list(pool.map(self.one, prompts))


def split_text(text: str, max_tokens: int, model: str | None = None) -> list[str]:
    """``text`` in consecutive segments of at most ~``max_tokens`` tokens, cut at natural boundaries."""
    if not text:
        return []
    if count_tokens(text, model) <= max_tokens:
        return [text]
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for piece in _pieces(text, max_tokens, model, 0):
        tokens = count_tokens(piece, model)
        if current and used + tokens > max_tokens:
            chunks.append("".join(current))
            current, used = [], 0
        current.append(piece)
        used += tokens
    if current:
        chunks.append("".join(current))
    return [c for c in chunks if c.strip()]


def _pieces(text: str, max_tokens: int, model: str | None, level: int) -> list[str]:
    """Split ``text`` (separators kept) until every piece fits in ``max_tokens``."""
    if count_tokens(text, model) <= max_tokens:
        return [text]
    if level == 0:
        parts = re.split(r"(?<=\n\n)", text)
    elif level == 1:
        parts = re.split(r"(?<=\n)", text)
    elif level == 2:
        parts = _SENTENCES.findall(text)
    elif level == 3:
        parts = re.split(r"(?<=\s)", text)
    else:
        parts = []
        rest = text
        while rest:
            head = truncate_to_tokens(rest, max_tokens, model)
            size = len(head) if head and rest.startswith(head) else max(1, len(head))
            parts.append(rest[:size])
            rest = rest[size:]
        return parts
    parts = [p for p in parts if p]
    if len(parts) <= 1:
        return _pieces(text, max_tokens, model, level + 1)
    out: list[str] = []
    for part in parts:
        out.extend(_pieces(part, max_tokens, model, level + 1))
    return out


def _groups(summaries: Sequence[str], max_tokens: int, model: str | None) -> list[list[str]]:
    """Consecutive summaries packed into groups that fit ``max_tokens``, at least two per group.

    Two per group at least means every reduce round at least halves the count.
    """
    groups: list[list[str]] = []
    current: list[str] = []
    used = 0
    for summary in summaries:
        tokens = count_tokens(summary, model) + 4
        if len(current) >= 2 and used + tokens > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(summary)
        used += tokens
    if current:
        if len(current) == 1 and groups:
            groups[-1].append(current[0])
        else:
            groups.append(current)
    return groups


def _join(summaries: Sequence[str]) -> str:
    return "\n\n".join(f"PART {i}:\n" + s for i, s in enumerate(summaries, 1))
