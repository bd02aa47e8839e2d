"""``summary``: summarise long text, a workspace file or a web page with the LLM (map-reduce).

The input is a text, a file in the workspace or an http(s) URL, read by
:func:`chatgpt_tool_hub.runtime.webpage.read_page` with the app's ``url_get_*``
settings (the guarded fetch and the text ``url-get`` returns). The summary is
:func:`chatgpt_tool_hub.llm.summarize.summarize`'s map-reduce: segments of at
most ``summary_max_segment_length`` tokens (on paragraph, line, sentence and
word boundaries) are summarised ("map"), then the partial summaries are
combined ("reduce"); text that fits in one segment takes one LLM call. The LLM is the calling engine's (``context.llm``); in pure mode
the tool builds one from its own settings.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ...llm.build import NO_LLM_HELP
from ...llm.summarize import COMBINE_PROMPT, MAP_PROMPT, SINGLE_PROMPT, SYSTEM_PROMPT, split_text, summarize
from ...runtime.urlcheck import BlockedURLError, HostResolutionError
from ...runtime.webpage import FetchError, FetchLimits, origin_of, read_page
from ..base import Tool, ToolContext
from ..context import AppContext, pure_context

__all__ = ["SummaryTool", "split_text", "SYSTEM_PROMPT", "SINGLE_PROMPT", "MAP_PROMPT", "COMBINE_PROMPT"]

_URL = re.compile(r"https?://\S+", flags=re.I)
_PATH_LIKE = re.compile(r"^(?:[~.]|\S*[/\\])\S*$|^\S+\.[A-Za-z0-9]{1,8}$")


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
    reads_untrusted = True  # a web page, or text handed in
    egress = "new-host"  # a URL to summarise is a fetch

    def __init__(self, *, max_segment_length: int = 2500, max_segments: int = 30, parallel: int = 4,
                 max_file_bytes: int = 2_000_000, workspace_dir: str = "./workspace",
                 app: AppContext | None = None, llm: Any = None):
        self.max_segment_length = max(100, int(max_segment_length))
        self.max_segments = max(1, int(max_segments))
        self.parallel = max(1, int(parallel))
        self.max_file_bytes = max(1000, int(max_file_bytes))
        self.workspace_dir = workspace_dir
        self.app = app  # the url_get_* settings of a fetch and, outside an engine, the LLM
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
        """Map-reduce summary of ``text`` with ``llm`` (``llm.summarize.summarize`` with this tool's limits),
        charged to the run of ``context``."""
        return summarize(text, llm, max_segment_length=self.max_segment_length, max_segments=self.max_segments,
                         parallel=self.parallel, budget=context.budget if context is not None else None,
                         usage=context.usage if context is not None else None, notes=notes)

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

    # ---- the input ----------------------------------------------------------------------

    def egress_host(self, tool_input: Any) -> str | None:
        """The ``host:port`` of a URL to summarise (None for text and files: they reach no host)."""
        if isinstance(tool_input, dict):
            tool_input = tool_input.get("text", "")
        text = tool_input.strip() if isinstance(tool_input, str) else ""
        return origin_of(text) if _URL.fullmatch(text) else None

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
        """The readable text of the page at ``url``, as ``url-get`` shows it, with the app's ``url_get_*``
        settings (read at call time); a refusal, a network failure, an HTTP error or binary content raises."""
        context = self.app or pure_context({})
        settings = context.settings
        try:
            limits = FetchLimits.from_settings(settings, context.http.proxy)
            max_chars = int(settings.get("url_get_max_chars", 8000))
            if max_chars <= 0:
                raise ConfigError("setting 'url_get_max_chars' must be > 0", key="url_get_max_chars")
            content = read_page(url, limits, links=bool(settings.get("url_get_include_links", False)),
                                max_chars=max_chars)
        except (BlockedURLError, HostResolutionError, FetchError, ConfigError) as exc:
            raise ToolExecutionError(f"could not fetch {url}: {exc}") from None
        except Exception as exc:  # never a traceback in an observation
            raise ToolExecutionError(f"could not fetch {url}: {type(exc).__name__}: {str(exc)[:200]}") from None
        return content
