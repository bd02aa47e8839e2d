"""``read-document`` and ``document-qa``: long documents (PDF, DOCX, HTML, Markdown, text) by pages and sections.

A document is a file in the workspace (opened link-safely, like the file
tools: no path outside the workspace, never the app's ``config.json`` or
``.env``) or an http(s) URL, fetched by :func:`chatgpt_tool_hub.runtime.webpage.fetch_page`,
the guarded fetch ``url-get`` runs too (the same SSRF guard, redirect checks,
``url_get_allow_private``, ``url_get_timeout`` and deadline), at most
``<tool>_max_bytes`` either way. It is parsed by
:mod:`.documents_formats` into pages (PDF) or sections (the headings of DOCX,
HTML and Markdown; blocks of 60 lines of text), each with the reference a
citation uses. The parse runs in a contained child process, killed past
``<tool>_timeout`` seconds, ``<tool>_max_memory_mb`` MiB or when the run is
cancelled, and bounded inside by ``<tool>_max_pages``,
``<tool>_max_content_bytes`` (PDF content streams) and ``<tool>_max_elements``
(DOCX paragraphs and table cells, HTML tags).

* ``read-document`` returns the text of the pages or sections asked for, at
  most ``read_document_max_chars`` characters, with their references, an
  outline of a document too long to show whole, and how to ask for the rest;
  ``summary: true`` summarises the selected text with the map-reduce the
  ``summary`` tool runs (:func:`chatgpt_tool_hub.llm.summarize.summarize`, with
  the ``summary_*`` settings, over the run's LLM, charged to the run).
* ``document-qa`` cuts the document into chunks and returns the
  ``document_qa_top_k`` that best match a question, each with its page or
  section, ranked by the bundled MiniLM sentence encoder
  (:mod:`chatgpt_tool_hub.runtime.models.embedding`, held by the app's model
  manager) or by BM25 (:mod:`.documents_index`). The index is kept per document content (a
  SHA-256 of the bytes), so a second question about the same document costs
  one embedding; the chunk vectors are also kept in the workspace
  (``.tool-hub/document-index``, ``document_qa_disk_cache``), for the next app.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ...errors import ConfigError, ModelFeedbackError, ToolExecutionError, ToolInputError
from ..base import DEFAULT_CONTEXT, Tool, ToolContext, ToolResult
from ..context import pure_context
from .documents_formats import Document, ParseLimits, Section, parse_contained

__all__ = ["ReadDocumentTool", "DocumentQATool", "DocumentTool"]

_URL = re.compile(r"https?://\S+", re.I)
_RANGE = re.compile(r"^\s*(\d+)?\s*(?:(-|–|\.\.|to)\s*(\d+)?)?\s*$")
_OUTLINE_ENTRIES = 40
INDEX_FOLDER = ".tool-hub/document-index"  # document-qa's chunk vectors, by document content and chunking
_SOURCE = {"type": "string", "description": "a document file in the workspace (PDF, DOCX, HTML, Markdown, text), "
                                            "or an http(s) URL"}


class DocumentTool(Tool):
    """What the two document tools share: finding, fetching, parsing and caching a document."""

    needs_context = True
    reads_untrusted = True  # a document fetched from a URL, or handed in: nobody here wrote it
    default_max_chars = 6000

    def __init__(self, *, workspace_dir: str | os.PathLike = "./workspace", protected: tuple[str, ...] = (),
                 max_bytes: int = 20_000_000, max_chars: int | None = None, max_pages: int = 500,
                 timeout: float = 120.0, max_memory_mb: int = 1024, max_content_bytes: int = 20_000_000,
                 max_elements: int = 200_000, app: Any = None):
        prefix = self.name.replace("-", "_")
        for key, value in (("max_bytes", max_bytes), ("max_chars", max_chars or 1), ("max_pages", max_pages),
                           ("timeout", timeout), ("max_memory_mb", max_memory_mb),
                           ("max_content_bytes", max_content_bytes), ("max_elements", max_elements)):
            if value <= 0:
                raise ConfigError(f"setting '{prefix}_{key}' must be > 0", key=f"{prefix}_{key}")
        self.workspace_dir = Path(workspace_dir).expanduser().resolve()
        self.protected = tuple(protected)
        self.max_bytes = int(max_bytes)
        self.max_chars = int(max_chars or self.default_max_chars)
        self.max_pages = int(max_pages)
        self.timeout, self.max_memory_mb = float(timeout), int(max_memory_mb)
        self.limits = ParseLimits(self.max_pages, int(max_content_bytes), int(max_elements), prefix)
        self.app = app  # the AppContext: url-get's and the summary's settings, the LLM, the model manager
        self._workspace: Any = None
        self._llm: Any = None  # outside an engine, the summary's LLM (built on first use)
        self._lock = threading.Lock()
        self._documents: OrderedDict[str, Document] = OrderedDict()

    @classmethod
    def settings_of(cls, context: Any) -> dict[str, Any]:
        prefix = cls.name.replace("-", "_")
        settings = context.settings
        return {"workspace_dir": context.workspace, "protected": tuple(context.config_sources),
                "max_bytes": settings.get(f"{prefix}_max_bytes", 20_000_000),
                "max_chars": settings.get(f"{prefix}_max_chars", cls.default_max_chars),
                "max_pages": settings.get(f"{prefix}_max_pages", 500),
                "timeout": settings.get(f"{prefix}_timeout", 120.0),
                "max_memory_mb": settings.get(f"{prefix}_max_memory_mb", 1024),
                "max_content_bytes": settings.get(f"{prefix}_max_content_bytes", 20_000_000),
                "max_elements": settings.get(f"{prefix}_max_elements", 200_000), "app": context}

    @classmethod
    def from_context(cls, context: Any) -> "DocumentTool":
        return cls(**cls.settings_of(context))

    def close(self) -> None:
        with self._lock:
            self._documents.clear()

    # ---- the document ------------------------------------------------------------------------

    def load(self, source: str, cancel: Any = None) -> tuple[Document, str, str]:
        """``(document, content hash, name as shown)`` of a workspace path or a URL; ``cancel`` (the run's
        budget) stops the parse."""
        source = str(source or "").strip().strip("'\"`")
        if not source:
            raise ToolInputError(f"{self.name} needs a document: a file in the workspace (report.pdf) or a URL")
        if _URL.fullmatch(source):
            data, content_type, shown = self._fetch(source)
        else:
            data, shown = self._read_file(source)
            content_type = ""
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            document = self._documents.get(digest)
            if document is not None:
                self._documents.move_to_end(digest)
                return document, digest, shown
        document = parse_contained(data, shown, content_type, limits=self.limits, timeout=self.timeout,
                                   memory_mb=self.max_memory_mb, cancel=cancel)
        with self._lock:
            self._documents[digest] = document
            while len(self._documents) > 8:
                self._documents.popitem(last=False)
        return document, digest, shown

    def _read_file(self, source: str) -> tuple[bytes, str]:
        from ...runtime.workspace import Workspace

        if self._workspace is None:
            self._workspace = Workspace(self.workspace_dir, self.protected)
        shown, parts = self._workspace.resolve(source)
        try:
            with os.fdopen(self._workspace.open_file(parts, shown), "rb") as fh:
                data = fh.read(self.max_bytes + 1)
        except ModelFeedbackError:
            raise
        except OSError as exc:
            raise ToolInputError(f"could not read '{shown}': {exc.strerror or exc}") from None
        if len(data) > self.max_bytes:
            raise ToolInputError(f"'{shown}' is larger than {self.max_bytes} bytes "
                                 f"({self.name.replace('-', '_')}_max_bytes); it was not read")
        return data, shown

    def _fetch(self, url: str) -> tuple[bytes, str, str]:
        from ...runtime.netguard import BlockedURLError, HostResolutionError
        from ...runtime.webpage import FetchError, FetchLimits, fetch_page

        app = self.app
        limits = FetchLimits() if app is None else FetchLimits.from_settings(app.settings, app.http.proxy)
        try:  # url-get's fetch and settings, this tool's size limit, the body of any content type
            page = fetch_page(url, dataclasses.replace(limits, max_bytes=self.max_bytes), any_type=True)
        except (BlockedURLError, HostResolutionError, FetchError) as exc:
            raise ToolExecutionError(f"could not fetch {url}: {exc}") from None
        if page.status >= 400:
            raise ToolExecutionError(f"could not fetch {url}: HTTP {page.status} {page.reason}")
        if page.truncated:
            raise ToolExecutionError(f"{url} is larger than {self.max_bytes} bytes "
                                     f"({self.name.replace('-', '_')}_max_bytes) or came too slowly; it was not read")
        return page.body, page.content_type + (f"; charset={page.charset}" if page.charset else ""), page.url

    @staticmethod
    def header(document: Document, shown: str) -> str:
        title = f" \"{document.title}\"" if document.title and document.title not in shown else ""
        return f"{shown}{title} ({document.describe()})"


class ReadDocumentTool(DocumentTool):
    name = "read-document"
    description = (
        "read-document: reads a long document -- a PDF, Word (DOCX), HTML, Markdown or text file in the workspace, "
        "or a URL -- by pages (PDF) or sections (the headings of the others). Use it to read a document, a part "
        "of it, or to summarise it. "
        'Input: {"source": "<file or URL>", "pages": "<e.g. 3, 2-5 or 1,4-6: PDF pages, else section numbers>", '
        '"section": "<words of a heading>", "summary": <true for a summary of the whole (or the selected) text>}. '
        "Output: the text with its page or section references; for a long document its outline and how to read "
        'more. Example: {"source": "report.pdf", "pages": "2-3"} -> "report.pdf (PDF, 12 pages), pages 2-3:\\n'
        '[page 2]\\n..."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "source": _SOURCE,
            "pages": {"type": ["string", "integer"], "description": "page numbers of a PDF (or section numbers of "
                                                                   "another document): 3, 2-5, 1,4-6, 7-"},
            "section": {"type": "string", "description": "words of a section heading (case does not matter)"},
            "summary": {"type": "boolean", "default": False,
                        "description": "summarise the text (the summary tool, with the app's LLM)"},
        },
        "required": ["source"],
        "additionalProperties": False,
    }

    def _run(self, source: str, pages: Any = None, section: str | None = None, summary: bool = False,
             context: ToolContext = DEFAULT_CONTEXT) -> ToolResult:
        document, _, shown = self.load(source, getattr(context, "budget", None))
        chosen, what = select(document, pages, section)
        if not any(s.text.strip() for s in chosen):
            note = f" ({'; '.join(document.notes)})" if document.notes else ""
            return ToolResult(f"{self.header(document, shown)}{what}: no text{note}.", value="")
        if summary:
            return self._summary(document, shown, chosen, what, context or DEFAULT_CONTEXT)
        lines = [f"{self.header(document, shown)}{what}:"]
        whole = pages is None and not section
        if whole and sum(len(s.text) for s in chosen) > self.max_chars and document.kind != "pdf":
            lines.append(outline(document))
        used = sum(len(line) for line in lines)
        shown_sections: list[Section] = []
        for item in chosen:
            block = f"[{item.ref}]\n{item.text}"
            if shown_sections and used + len(block) > self.max_chars:
                break
            if used + len(block) > self.max_chars:  # one section longer than the limit: its head
                block = block[: max(200, self.max_chars - used)].rstrip() + " [...]"
            lines.append(block)
            used += len(block)
            shown_sections.append(item)
        rest = chosen[len(shown_sections):]
        unit = "pages" if document.kind == "pdf" else "sections"
        if rest:
            first, last = rest[0].number, rest[-1].number
            lines.append(f"[not shown: {unit} {first}-{last} ({self.name.replace('-', '_')}_max_chars={self.max_chars});"
                         f" ask for them with \"pages\": \"{first}-{min(last, first + len(shown_sections) - 1)}\"]")
        lines.extend(f"[note: {note}]" for note in document.notes)
        return ToolResult("\n\n".join(lines), value="\n\n".join(s.text for s in shown_sections))

    def _summary(self, document: Document, shown: str, chosen: list[Section], what: str,
                 context: ToolContext) -> ToolResult:
        """The map-reduce summary of the chosen text (``llm.summarize``, the ``summary`` tool's settings)."""
        from ...llm.summarize import summarize

        app = self.app if self.app is not None else pure_context({})
        settings = app.settings
        body = "\n\n".join(f"[{s.ref}]\n{s.text}" for s in chosen if s.text.strip())
        notes: list[str] = []
        summary = summarize(f"{document.title or shown}\n\n{body}", self._summary_llm(app, context),
                            max_segment_length=settings.get("summary_max_segment_length", 2500),
                            max_segments=settings.get("summary_max_segments", 30),
                            parallel=settings.get("summary_parallel", 4),
                            budget=context.budget, usage=context.usage, notes=notes).strip()
        if notes:
            summary += "\n\n(" + " ".join(notes) + ")"
        return ToolResult(f"Summary of {self.header(document, shown)}{what}:\n{summary}", value=summary)

    def _summary_llm(self, app: Any, context: ToolContext) -> Any:
        """The run's LLM; outside an engine one built by the app (pure mode: from the tool's keywords)."""
        if context.llm is not None:
            return context.llm
        if self._llm is None:
            from ...llm.build import NO_LLM_HELP

            try:
                self._llm = app.build_llm()
            except ConfigError:
                raise ToolExecutionError(f"a summary by {self.name} needs an LLM, and none is configured.\n"
                                         + NO_LLM_HELP) from None
            except Exception as exc:  # e.g. the local backend's packages are missing
                raise ToolExecutionError(f"{self.name} could not set up an LLM for the summary: "
                                         f"{type(exc).__name__}: {str(exc)[:200]}") from None
        return self._llm


class DocumentQATool(DocumentTool):
    name = "document-qa"
    default_max_chars = 5000
    description = (
        "document-qa: finds the passages of a long document -- a PDF, Word (DOCX), HTML, Markdown or text file "
        "in the workspace, or a URL -- that answer a question, with their page or section, so that you can answer "
        "from them and cite them. Use it for questions about a document that is too long to read whole. "
        'Input: {"source": "<file or URL>", "question": "<the question>", "top_k": <passages, default 4>}. '
        "Output: the best passages, most relevant first, each with its reference. "
        'Example: {"source": "report.pdf", "question": "What was the revenue in 2023?"} -> "[1] page 7 (score '
        '0.71)\\nRevenue grew to $4.2M in 2023 ..."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "source": _SOURCE,
            "question": {"type": "string", "description": "what to find in the document"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "how many passages"},
        },
        "required": ["source", "question"],
        "additionalProperties": False,
    }

    def __init__(self, *, top_k: int = 4, chunk_chars: int = 900, chunk_overlap: int = 120, retrieval: str = "auto",
                 max_chunks: int = 5000, disk_cache: bool = True, **kwargs: Any):
        from .documents_index import RETRIEVALS, IndexCache

        super().__init__(**kwargs)
        retrieval = str(retrieval or "auto").strip().lower()
        if retrieval not in RETRIEVALS:
            raise ConfigError(f"setting 'document_qa_retrieval' must be one of {', '.join(RETRIEVALS)}, got "
                              f"{retrieval[:30]!r}", key="document_qa_retrieval")
        self.top_k, self.retrieval = max(1, int(top_k)), retrieval
        self.chunk_chars, self.chunk_overlap, self.max_chunks = int(chunk_chars), int(chunk_overlap), int(max_chunks)
        self.indexes = IndexCache(folder=self.workspace_dir / INDEX_FOLDER if disk_cache else None)
        self._encoder: Any = None

    @classmethod
    def from_context(cls, context: Any) -> "DocumentQATool":
        settings = context.settings
        return cls(top_k=settings.get("document_qa_top_k", 4), chunk_chars=settings.get("document_qa_chunk_chars", 900),
                   chunk_overlap=settings.get("document_qa_chunk_overlap", 120),
                   retrieval=settings.get("document_qa_retrieval", "auto"),
                   max_chunks=settings.get("document_qa_max_chunks", 5000),
                   disk_cache=settings.get("document_qa_disk_cache", True), **cls.settings_of(context))

    def close(self) -> None:
        super().close()
        self.indexes.clear()

    def encoder(self) -> Any:
        """The sentence encoder that embeds the chunks (built once, loads nothing): an ``Embedder`` with the
        ``sentence-similarity`` tool's settings, held by the app's model manager (alone: the shared one of
        its ``expert_memory_budget_mb``)."""
        if self._encoder is None:
            from ...runtime.models.embedding import Embedder
            from ...runtime.models.manager import manager_of

            app = self.app if self.app is not None else pure_context({"workspace_dir": str(self.workspace_dir)})
            self._encoder = Embedder.from_settings(app.settings, manager_of(app.models, app.settings))
        return self._encoder

    def method(self) -> tuple[str, str]:
        """``(retrieval method, a note when auto fell back to lexical ranking)``."""
        if self.retrieval == "lexical":
            return "lexical", ""
        from .documents_index import embedding_available

        ok, why = embedding_available(self.encoder())
        if ok:
            return "embedding", ""
        if self.retrieval == "embedding":
            raise ToolExecutionError(f"document_qa_retrieval=embedding, but the sentence encoder cannot run: {why}. "
                                     f"Install it (pip install \"chatgpt-tool-hub[planner]\") or set "
                                     f"document_qa_retrieval=lexical")
        return "lexical", f"ranked by shared words (BM25): {why}"

    def _run(self, source: str, question: str, top_k: int | None = None,
             context: ToolContext = DEFAULT_CONTEXT) -> ToolResult:
        from .documents_index import chunk_document

        question = str(question or "").strip()
        if not question:
            raise ToolInputError('document-qa needs a question, e.g. {"source": "report.pdf", "question": "What was '
                                 'the revenue in 2023?"}')
        document, digest, shown = self.load(source, getattr(context, "budget", None))
        method, note = self.method()
        encoder = self.encoder() if method == "embedding" else None
        key = (digest, self.chunk_chars, self.chunk_overlap, method, getattr(encoder, "model", ""))
        chunks = chunk_document(document, self.chunk_chars, self.chunk_overlap, self.max_chunks)
        if not chunks:
            notes = f" ({'; '.join(document.notes)})" if document.notes else ""
            return ToolResult(f"{self.header(document, shown)} has no text to search{notes}.", value="")
        index = self.indexes.get(key, chunks, method, encoder)
        found = index.search(question, top_k or self.top_k, encoder)
        if method == "lexical" and any(score > 0 for score, _ in found):
            found = [(score, chunk) for score, chunk in found if score > 0]  # passages without a shared word
        lines = [f"Passages of {self.header(document, shown)} that best match the question {question!r} "
                 f"({method} retrieval, most relevant first):"]
        budget = self.max_chars - len(lines[0])
        per = max(300, budget // max(1, len(found)))
        for rank, (score, chunk) in enumerate(found, 1):
            text = chunk.text if len(chunk.text) <= per else chunk.text[:per].rstrip() + " [...]"
            lines.append(f"[{rank}] {chunk.ref} (score {score:.3f})\n{text}")
        if method == "lexical" and found and found[0][0] <= 0:
            lines.append("[note: no passage shares a word with the question; try other words]")
        if note:
            lines.append(f"[note: {note}]")
        if len(chunks) >= self.max_chunks:
            lines.append(f"[note: only the first {self.max_chunks} chunks were searched (document_qa_max_chunks)]")
        lines.extend(f"[note: {n}]" for n in document.notes)
        lines.append("Answer from these passages and cite their references; if they do not hold the answer, say so.")
        return ToolResult("\n\n".join(lines), value="\n\n".join(f"[{c.ref}] {c.text}" for _, c in found))


# ---- choosing pages and sections ------------------------------------------------------------------


def parse_numbers(spec: Any, last: int) -> list[int]:
    """``"3"``, ``"2-5"``, ``"1,4-6"``, ``"7-"`` (to the end) as numbers between 1 and ``last``."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = str(spec)
    numbers: list[int] = []
    for part in str(spec).split(","):
        if not part.strip():
            continue
        match = _RANGE.match(part)
        if not match or (match.group(1) is None and match.group(3) is None):
            raise ToolInputError(f"'pages' must be numbers and ranges like 3, 2-5 or 1,4-6, not {str(spec)[:40]!r}")
        start = int(match.group(1) or 1)
        end = int(match.group(3) or last) if match.group(2) else start
        if start > end:
            start, end = end, start
        numbers.extend(n for n in range(max(1, start), min(end, last) + 1) if n not in numbers)
    return numbers


def select(document: Document, pages: Any, section: str | None) -> tuple[list[Section], str]:
    """The sections asked for and how to name them (``", pages 2-3"``); all of them when nothing is asked."""
    sections = document.sections
    unit = "page" if document.kind == "pdf" else "section"
    chosen = sections
    what = ""
    if pages not in (None, ""):
        wanted = parse_numbers(pages, len(sections))
        chosen = [s for s in sections if s.number in wanted]
        if not chosen:
            raise ToolInputError(f"the document has {len(sections)} {unit}s; {unit} {str(pages)[:20]} is not among "
                                 f"them")
        what = f", {unit}s {pages}" if len(chosen) > 1 else f", {unit} {chosen[0].number}"
    if section and str(section).strip():
        words = str(section).strip().lower()
        matched = [s for s in chosen if words in s.title.lower()] or [
            s for s in chosen if all(w in s.title.lower() for w in words.split())]
        if not matched:
            raise ToolInputError(f"no section heading contains {section!r}; the sections are: "
                                 f"{outline(document, 20)}")
        chosen = matched
        what += f", section{'s' if len(matched) > 1 else ''} matching {section!r}"
    return chosen, what


def outline(document: Document, most: int = _OUTLINE_ENTRIES) -> str:
    """The section list of a document (``Outline: 1 "Intro" (1200 chars); 2 ...``)."""
    entries = [f"{s.number} \"{s.title}\" ({len(s.text)} chars)" if s.title else f"{s.number} ({len(s.text)} chars)"
               for s in document.sections[:most]]
    more = f"; ... {len(document.sections) - most} more" if len(document.sections) > most else ""
    return "Outline: " + "; ".join(entries) + more
