"""``summary``: summarise long text, a workspace file or a web page with the LLM (map-reduce).

The input is split into segments of at most ``summary_max_segment_length``
tokens (on paragraph, line, sentence and word boundaries); each segment is
summarised ("map"), then the partial summaries are combined ("reduce"). Text
that fits in one segment takes one LLM call. The LLM is the calling engine's
(``context.llm``); in pure mode the tool builds one from its own settings.

User text is only ever concatenated to the prompts below, never formatted.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from ...errors import ConfigError, LLMError, ModelFeedbackError, RunError, ToolExecutionError, ToolInputError
from ...llm.base import call_llm
from ...llm.build import NO_LLM_HELP
from ...llm.tokens import count_tokens, truncate_to_tokens
from ..base import Tool, ToolContext
from ..context import AppContext, pure_context

__all__ = ["SummaryTool", "split_text", "SYSTEM_PROMPT", "SINGLE_PROMPT", "MAP_PROMPT", "COMBINE_PROMPT"]

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

_URL = re.compile(r"https?://\S+", flags=re.I)
_PATH_LIKE = re.compile(r"^(?:[~.]|\S*[/\\])\S*$|^\S+\.[A-Za-z0-9]{1,8}$")
_SENTENCES = re.compile(r"[^.!?。！？；]*[.!?。！？；]+[\"'”’)\]]*\s*|[^.!?。！？；]+$")
_MAX_REDUCE_ROUNDS = 4


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


class SummaryTool(Tool):
    name = "summary"
    description = (
        "Summarise a long text, a file in the workspace (give its relative path) or a web page (give its "
        "http(s) URL). Input: the text, the path or the URL."
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "long text, a workspace file path, or a URL"}},
        "required": ["text"],
    }
    needs_context = True

    def __init__(self, *, max_segment_length: int = 2500, max_segments: int = 30, parallel: int = 4,
                 max_file_bytes: int = 2_000_000, workspace_dir: str = "./workspace",
                 app: AppContext | None = None, llm: Any = None):
        self.max_segment_length = max(100, int(max_segment_length))
        self.max_segments = max(1, int(max_segments))
        self.parallel = max(1, int(parallel))
        self.max_file_bytes = max(1000, int(max_file_bytes))
        self.workspace_dir = workspace_dir
        self.app = app  # builds the url-get tool and, outside an engine, the LLM
        self._llm = llm

    @classmethod
    def from_context(cls, context: AppContext) -> "SummaryTool":
        settings = context.settings
        return cls(
            max_segment_length=settings.get("summary_max_segment_length", 2500),
            max_segments=settings.get("summary_max_segments", 30),
            parallel=settings.get("summary_parallel", 4),
            max_file_bytes=settings.get("summary_max_file_bytes", 2_000_000),
            workspace_dir=str(context.workspace),
            app=context,
        )

    def __repr__(self) -> str:
        return f"<SummaryTool {self.name!r}>"

    # ---- the run ----------------------------------------------------------------------

    def _run(self, text: str, context: ToolContext | None = None, **_ignored: Any) -> str:
        context = context or ToolContext()
        kind, value = self._classify(text)
        llm = self._resolve_llm(context)
        notes: list[str] = []
        if kind == "url":
            content, source = self._fetch_url(value), value
        elif kind == "file":
            content, source = self._read_file(value, notes), os.path.relpath(value, self._workspace())
        else:
            content, source = value, None
        if not content.strip():
            raise ToolInputError(f"there is no text to summarise in {source or 'the input'}")
        summary = self.summarise(content, llm, context=context, notes=notes)
        head = f"Summary of {source}:\n" if source else ""
        tail = ("\n\n(" + " ".join(notes) + ")") if notes else ""
        return head + summary + tail

    def summarise(self, text: str, llm: Any, *, context: ToolContext | None = None,
                  notes: list[str] | None = None) -> str:
        """Map-reduce summary of ``text`` with ``llm`` (one call when it fits in one segment)."""
        model = getattr(llm, "model_name", None)
        model = model if isinstance(model, str) and model not in ("scripted", "unknown") else None
        chunks = split_text(text, self.max_segment_length, model)
        if len(chunks) > self.max_segments:
            if notes is not None:
                notes.append(f"the text was longer than {self.max_segments} segments of "
                             f"{self.max_segment_length} tokens; only the first {self.max_segments} were "
                             f"summarised (summary_max_segments)")
            chunks = chunks[: self.max_segments]
        if len(chunks) <= 1:
            return self._ask(llm, SINGLE_PROMPT + (chunks[0] if chunks else text) + SUMMARY_TAIL, context)
        total = len(chunks)
        prompts = [MAP_PROMPT + f"PART {i} OF {total}:\n" + chunk + SUMMARY_TAIL for i, chunk in enumerate(chunks, 1)]
        summaries = self._ask_all(llm, prompts, context)
        for _ in range(_MAX_REDUCE_ROUNDS):
            if len(summaries) <= 2 or count_tokens(_join(summaries), model) <= self.max_segment_length:
                break
            # the partial summaries do not fit in one prompt: combine them in groups first
            groups = _groups(summaries, self.max_segment_length, model)
            summaries = self._ask_all(llm, [COMBINE_PROMPT + _join(g) + SUMMARY_TAIL for g in groups], context)
        return self._ask(llm, COMBINE_PROMPT + _join(summaries) + SUMMARY_TAIL, context)

    # ---- the LLM ------------------------------------------------------------------------

    def _resolve_llm(self, context: ToolContext) -> Any:
        if context.llm is not None:
            return context.llm
        if self._llm is None:
            try:
                self._llm = (self.app or pure_context({})).build_llm()
            except ConfigError:
                raise ToolExecutionError("the summary tool needs an LLM, and none is configured.\n"
                                         + NO_LLM_HELP) from None
            except Exception as exc:  # e.g. the local backend's packages are missing
                raise ToolExecutionError(f"the summary tool could not set up its LLM: {type(exc).__name__}: "
                                         f"{str(exc)[:200]}") from None
        return self._llm

    def _ask(self, llm: Any, prompt: str, context: ToolContext | None) -> str:
        if context is not None and context.budget is not None:
            try:
                context.budget.charge_llm()
            except RunError as exc:
                raise ToolExecutionError(f"stopped summarising: {exc}") from None
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
        try:
            response = call_llm(llm, messages)
        except LLMError as exc:
            raise ToolExecutionError(f"the LLM failed while summarising: {exc}") from None
        if context is not None and context.usage is not None:
            context.usage.calls.append(response.usage)  # counted in the run's RunResult.usage
        text = response.text
        return ("" if text is None else str(text)).strip() or "(the LLM returned an empty summary)"

    def _ask_all(self, llm: Any, prompts: Sequence[str], context: ToolContext | None) -> list[str]:
        if self.parallel <= 1 or len(prompts) <= 1:
            return [self._ask(llm, p, context) for p in prompts]
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(prompts))) as pool:
            return list(pool.map(lambda p: self._ask(llm, p, context), prompts))

    # ---- the input ----------------------------------------------------------------------

    def _workspace(self) -> str:
        return os.path.realpath(os.path.expanduser(self.workspace_dir))

    def _classify(self, text: str) -> tuple[str, str]:
        """("url", url) | ("file", real path) | ("text", text); refuses paths outside the workspace."""
        stripped = (text or "").strip()
        if not stripped:
            raise ToolInputError("the summary tool needs text, a workspace file path or an http(s) URL as input")
        if _URL.fullmatch(stripped):
            return "url", stripped
        if "\n" in stripped or len(stripped) > 1024:
            return "text", text
        candidate = stripped.strip("'\"`")
        workspace = self._workspace()
        real = os.path.realpath(os.path.join(workspace, os.path.expanduser(candidate)))
        path_like = bool(_PATH_LIKE.match(candidate))
        inside = os.path.commonpath([workspace, real]) == workspace
        if not inside and (path_like or os.path.exists(real)):
            raise ToolInputError(f"refused: '{candidate}' is outside the workspace; only files inside "
                                 f"workspace_dir can be summarised (give a path relative to it)")
        if inside and os.path.isfile(real):
            return "file", real
        if path_like and inside and real != workspace:
            raise ToolInputError(f"no file '{candidate}' in the workspace; give a path relative to workspace_dir, "
                                 f"a URL, or the text itself")
        return "text", text

    def _read_file(self, path: str, notes: list[str]) -> str:
        from ...runtime.workspace import Workspace  # the file tools' link-safe opening

        workspace = Workspace(self.workspace_dir)
        try:
            shown, parts = workspace.resolve(os.path.relpath(path, workspace.root))
            with os.fdopen(workspace.open_file(parts, shown), "rb") as fh:
                data = fh.read(self.max_file_bytes + 1)
        except OSError as exc:
            raise ToolExecutionError(f"could not read '{os.path.basename(path)}': {exc.strerror or exc}") from None
        if b"\x00" in data[:8192]:
            raise ToolInputError(f"'{os.path.basename(path)}' is not a text file")
        if len(data) > self.max_file_bytes:
            data = data[: self.max_file_bytes]
            notes.append(f"only the first {self.max_file_bytes} bytes of the file were read (summary_max_file_bytes)")
        return data.decode("utf-8-sig", errors="replace")

    def _fetch_url(self, url: str) -> str:
        try:  # the app's own url-get (its registry, its settings), built at call time
            getter = (self.app or pure_context({})).build_tool("url-get")
            getter.use_summary = False  # url-get must not call summary back
        except Exception as exc:
            raise ToolExecutionError(f"could not fetch {url}: the url-get tool is unavailable "
                                     f"({type(exc).__name__}: {str(exc)[:200]})") from None
        try:
            content = getter.run(url)
        except ModelFeedbackError:
            raise
        except Exception as exc:
            raise ToolExecutionError(f"could not fetch {url}: {type(exc).__name__}: {str(exc)[:200]}") from None
        if not content or not str(content).strip():
            raise ToolExecutionError(f"url-get returned no text for {url}")
        return str(content)


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
