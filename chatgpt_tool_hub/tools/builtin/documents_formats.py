"""Documents as pages and sections: PDF (pypdf), DOCX (python-docx), HTML (readability-lxml), Markdown, text.

:func:`parse_document` turns a file's bytes into a :class:`Document`: a title,
a kind and a list of :class:`Section` objects, each with the reference a
citation uses (``page 3`` for a PDF; ``section 2 "Methods"`` for DOCX, HTML
and Markdown, split at their headings; ``lines 1-40`` for plain text). The
format is found from the content itself (``%PDF``, a ZIP holding
``word/document.xml``, an ``<html>`` start), then the file name or the
content type. Every reader is bounded by a work budget (:class:`ParseLimits`):
``max_pages`` pages of a PDF and ``max_content_bytes`` bytes of its content
streams (counted before the text is extracted, forms counted each time a page
draws them), ``max_elements`` paragraphs and table cells of a DOCX (each cell
read once, whatever it spans) or tags of an HTML page (past a fifth of it the
page, or one longer than 2 MB, is read whole, without main-content
extraction), and a DOCX whose unpacked parts exceed ``MAX_UNPACKED_BYTES`` is
refused before it is read. What the budget cuts off is named in the
document's notes, with the setting that raises it. A format library that is missing or fails becomes a
``ToolExecutionError`` / ``ToolInputError`` naming the extra to install, never
a traceback. The libraries are imported on first use only.

:func:`parse_contained` runs :func:`parse_document` in a contained child
process (:func:`chatgpt_tool_hub.runtime.contained.run_contained`): a wall
limit, a memory limit, killed on the run's cancel. That is how the document
tools parse; :func:`parse_document` itself parses in the calling process.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any, Iterable

from ...errors import ToolExecutionError, ToolInputError
from ...textutil import decode_text

__all__ = ["Document", "Section", "ParseLimits", "parse_document", "parse_contained", "parse_in_child",
           "detect_kind", "simple_pdf", "DOCUMENTS_HINT", "KINDS", "MAX_UNPACKED_BYTES"]

DOCUMENTS_HINT = 'pip install "chatgpt-tool-hub[documents]"'
KINDS = {"pdf": "PDF", "docx": "DOCX", "html": "HTML", "markdown": "Markdown", "text": "text"}
MAX_UNPACKED_BYTES = 200_000_000  # a DOCX (a ZIP) that unpacks to more is refused: a zip bomb
_TEXT_LINES_PER_SECTION = 60
_EXTENSIONS = {".pdf": "pdf", ".docx": "docx", ".html": "html", ".htm": "html", ".xhtml": "html", ".md": "markdown",
               ".markdown": "markdown", ".mdown": "markdown", ".txt": "text", ".rst": "text", ".csv": "text",
               ".log": "text", ".json": "text", ".xml": "text", ".yaml": "text", ".yml": "text"}
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HTML_HEADING = re.compile(r"^(#{1,6}) (.+)$")
_BOILERPLATE = re.compile(r"<(nav|footer|aside)\b", re.I)
_DO = re.compile(rb"/([^\s/\[\]()<>{}%]+)\s+Do\b")  # a content stream drawing an XObject by name
_FORM_DEPTH = 12  # forms drawing forms deeper than this count as over the budget
_TAG = re.compile(r"<[A-Za-z!/?]")
_READABLE_CHARS = 2_000_000  # a longer HTML page is read whole, without readability's main-content extraction


@dataclass(frozen=True)
class ParseLimits:
    """The work one parse may do; ``prefix`` names the settings that raise each limit in notes and errors."""

    max_pages: int = 500                 # PDF pages read
    max_content_bytes: int = 20_000_000  # PDF content-stream bytes read (decoded; a form once per drawing)
    max_elements: int = 200_000          # DOCX paragraphs + table cells, HTML tags
    prefix: str = "read_document"


@dataclass
class Section:
    """One page (PDF) or one part between headings; ``first_line`` for text that has line numbers."""

    number: int
    text: str
    title: str = ""
    kind: str = "section"        # "page" or "section" or "lines"
    first_line: int | None = None

    @property
    def ref(self) -> str:
        """How a citation names it: ``page 3``, ``section 2 "Methods"``, ``lines 61-120``."""
        if self.kind == "page":
            return f"page {self.number}"
        if self.kind == "lines" and self.first_line is not None:
            return f"lines {self.first_line}-{self.first_line + max(0, self.text.count(chr(10)))}"
        return f'section {self.number} "{self.title}"' if self.title else f"section {self.number}"


@dataclass
class Document:
    title: str
    kind: str                           # a key of KINDS
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pages: int = 0                      # a PDF's page count (all of them, also those not read)

    @property
    def text(self) -> str:
        return "\n\n".join(section.text for section in self.sections)

    def describe(self) -> str:
        """``PDF, 12 pages`` / ``DOCX, 5 sections``."""
        if self.kind == "pdf":
            return f"PDF, {self.pages} page{'s' if self.pages != 1 else ''}"
        count = len(self.sections)
        unit = "part" if self.kind == "text" else "section"
        return f"{KINDS[self.kind]}, {count} {unit}{'s' if count != 1 else ''}"


def detect_kind(data: bytes, name: str = "", content_type: str = "") -> str:
    """The document's kind from its first bytes, then its name's extension, then its content type."""
    head = data[:1024].lstrip()
    if head.startswith(b"%PDF"):
        return "pdf"
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                if "word/document.xml" in archive.namelist():
                    return "docx"
        except zipfile.BadZipFile:
            pass
        raise ToolInputError(f"'{name or 'the file'}' is a ZIP archive but not a Word document (DOCX); "
                             f"read-document reads PDF, DOCX, HTML, Markdown and text")
    lower = name.lower().split("?", 1)[0]
    for ext, kind in _EXTENSIONS.items():
        if lower.endswith(ext):
            if kind in ("pdf", "docx"):  # the name says so, the bytes do not
                raise ToolInputError(f"'{name}' is named like a {KINDS[kind]} file but is not one")
            return kind
    ctype = content_type.lower()
    if "html" in ctype or re.match(rb"(?i)\s*(<!doctype html|<html|<head|<body)", head):
        return "html"
    if "markdown" in ctype:
        return "markdown"
    if b"\x00" in data[:8192]:
        raise ToolInputError(f"'{name or 'the file'}' is binary and not a document read-document reads "
                             f"(PDF, DOCX, HTML, Markdown, text)")
    return "text"


def parse_document(data: bytes, name: str = "", content_type: str = "", *, max_pages: int = 500,
                   limits: ParseLimits | None = None) -> Document:
    """``data`` as a :class:`Document` (see the module docstring), in this process; ``limits`` (default:
    :class:`ParseLimits` with ``max_pages``) bound the work."""
    limits = limits or ParseLimits(max_pages=max_pages)
    kind = detect_kind(data, name, content_type)
    charset = _charset(content_type)
    if kind == "pdf":
        return _pdf(data, name, limits)
    if kind == "docx":
        return _docx(data, name, limits)
    if kind == "html":
        return _html(decode_text(data, charset, html=True, guess=True), name, limits)
    text = decode_text(data, charset, guess=True).replace("\r\n", "\n").replace("\r", "\n")
    if kind == "markdown":
        return _markdown(text, name)
    return _plain(text, name)


def parse_contained(data: bytes, name: str = "", content_type: str = "", *, limits: ParseLimits | None = None,
                    timeout: float = 120.0, memory_mb: int | None = 1024, cancel: Any = None) -> Document:
    """:func:`parse_document` in a contained child process: killed past ``timeout`` wall seconds, past
    ``memory_mb`` MiB of address space, or when ``cancel`` (a ``Cancellation`` or a run's budget) fires --
    a ``ContainedError`` naming the ``<prefix>_timeout`` or ``<prefix>_max_memory_mb`` setting."""
    from ...runtime.contained import run_contained

    limits = limits or ParseLimits()
    payload = {"data": data, "name": name, "content_type": content_type, "limits": limits}
    return run_contained("chatgpt_tool_hub.tools.builtin.documents_formats:parse_in_child", payload, wall_s=timeout,
                         memory_mb=memory_mb, cancel=cancel, what=f"parsing '{name or 'the document'}'",
                         settings={"wall": f"{limits.prefix}_timeout", "memory": f"{limits.prefix}_max_memory_mb"},
                         result_types=(Document, Section))


def parse_in_child(payload: dict) -> Document:
    """What the contained child runs for :func:`parse_contained`."""
    return parse_document(payload["data"], payload["name"], payload["content_type"], limits=payload["limits"])


# ---- PDF -------------------------------------------------------------------------------------


def _pdf(data: bytes, name: str, limits: ParseLimits) -> Document:
    try:
        import pypdf
    except ImportError:
        raise ToolExecutionError(f"reading PDF files needs pypdf, which is not installed: {DOCUMENTS_HINT}") from None
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # damaged files log warnings by the hundred
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ToolInputError(f"'{name}' is a password-protected PDF; give a copy without a password")
        pages = list(reader.pages)
        metadata: Any = reader.metadata or {}
        title = str(metadata.get("/Title") or "").strip()
    except ToolInputError:
        raise
    except Exception as exc:  # pypdf raises many kinds for damaged files
        raise ToolInputError(f"'{name}' is not a PDF read-document can read ({type(exc).__name__}: "
                             f"{str(exc)[:120]})") from None
    document = Document(title, "pdf", pages=len(pages))
    max_pages, left = limits.max_pages, limits.max_content_bytes
    for number, page in enumerate(pages[:max_pages], 1):
        try:
            size = _content_bytes(page, left)
        except Exception as exc:
            size = 0
            document.notes.append(f"the content of page {number} could not be read ({type(exc).__name__})")
        if size > left:  # the text extraction's cost grows with the content it reads: stop before it
            read = f"only the first {number - 1} of {len(pages)} pages were read" if number > 1 else "no page was read"
            document.notes.append(f"truncated: {read}; the content streams of pages 1-{number} hold more than "
                                  f"{limits.max_content_bytes} bytes ({limits.prefix}_max_content_bytes)")
            break
        left -= size
        try:
            text = (page.extract_text() or "") if size else ""  # a page with no content has no text
        except Exception as exc:
            text = ""
            document.notes.append(f"the text of page {number} could not be read ({type(exc).__name__})")
        document.sections.append(Section(number, _tidy(text), kind="page"))
    else:
        if len(pages) > max_pages:
            document.notes.append(f"only the first {max_pages} of {len(pages)} pages were read "
                                  f"({limits.prefix}_max_pages)")
    if document.sections and not any(section.text for section in document.sections):
        document.notes.append("the PDF has no text layer (a scan?): run an OCR tool on its pages first")
    return document


def _content_bytes(page: Any, limit: int) -> int:
    """The content-stream bytes extracting ``page``'s text reads: its contents and, each time it draws one,
    a form XObject's (forms in forms too); ``limit + 1`` as soon as it is more than ``limit``."""
    contents = page.get_contents()
    if contents is None:
        return 0
    return _drawn(contents.get_data(), page.get("/Resources"), limit, {}, 0)


def _drawn(stream: bytes, resources: Any, limit: int, sizes: dict[int, int], depth: int) -> int:
    total = len(stream)
    xobjects = _entry(resources, "/XObject")
    if total > limit or not xobjects:
        return min(total, limit + 1)
    for match in _DO.finditer(stream):
        form = xobjects.get("/" + match.group(1).decode("latin-1"))
        form = form.get_object() if form is not None else None
        if form is None or _entry(form, "/Subtype") != "/Form":
            continue  # an image: text extraction does not read it
        key = id(form)
        if key not in sizes:
            sizes[key] = limit + 1  # while it is measured: a form that draws itself is over any budget
            if depth < _FORM_DEPTH:
                sizes[key] = _drawn(form.get_data(), _entry(form, "/Resources") or resources, limit, sizes, depth + 1)
        total += sizes[key]
        if total > limit:
            return limit + 1
    return total


def _entry(obj: Any, key: str) -> Any:
    try:
        return obj.get(key) if obj is not None else None
    except Exception:  # a damaged dictionary
        return None


def simple_pdf(pages: Iterable[Iterable[str]], title: str = "") -> bytes:
    """A minimal PDF (Helvetica, Latin-1 text) with one page per item of ``pages``, each a list of lines:
    for examples and tests that need a PDF without a PDF writer."""
    def escape(line: str) -> str:
        raw = line.encode("latin-1", "replace").decode("latin-1")
        return raw.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    pages = [list(lines) for lines in pages]
    count = len(pages)
    objects = ["<< /Type /Catalog /Pages 2 0 R >>",
               "<< /Type /Pages /Kids [" + " ".join(f"{4 + 2 * i} 0 R" for i in range(count)) + f"] /Count {count} >>",
               "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"]
    for i, lines in enumerate(pages):
        stream = "BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(f"({escape(line)}) Tj T*" for line in lines) + " ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> "
                       f">> /Contents {5 + 2 * i} 0 R >>")
        objects.append(f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\nendstream")
    info = f"<< /Title ({escape(title)}) >>" if title else ""
    if info:
        objects.append(info)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode("latin-1")
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode("latin-1")
    trailer = f"/Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {len(objects)} 0 R" if info else "")
    out += f"trailer\n<< {trailer} >>\nstartxref\n{xref}\n%%EOF\n".encode("latin-1")
    return bytes(out)


# ---- DOCX ------------------------------------------------------------------------------------


def _docx(data: bytes, name: str, limits: ParseLimits) -> Document:
    try:
        import docx
        from docx.table import Table, _Cell
    except ImportError:
        raise ToolExecutionError(f"reading DOCX files needs python-docx, which is not installed: "
                                 f"{DOCUMENTS_HINT}") from None
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
    if unpacked > MAX_UNPACKED_BYTES:
        raise ToolInputError(f"'{name}' unpacks to {unpacked} bytes, more than {MAX_UNPACKED_BYTES}; it was not read")
    try:
        word = docx.Document(io.BytesIO(data))
        title = str(word.core_properties.title or "").strip()
        blocks = list(word.iter_inner_content())
    except Exception as exc:
        raise ToolInputError(f"'{name}' is not a Word document read-document can read ({type(exc).__name__})") from None
    parts: list[tuple[str, list[str]]] = [("", [])]
    left = limits.max_elements
    for block in blocks:
        if left <= 0:
            return _from_parts(title, "docx", parts, [f"truncated: only the first {limits.max_elements} paragraphs "
                                                      f"and table cells were read ({limits.prefix}_max_elements)"])
        if isinstance(block, Table):
            rows, left = _table_rows(block, _Cell, left)
            parts[-1][1].append("\n".join(rows))
            continue
        left -= 1
        text = block.text.strip()
        style = str(getattr(block.style, "name", "") or "")
        if text and (style.startswith("Heading") or style == "Title"):
            if style == "Title" and not title:
                title = text
            parts.append((text, []))
        elif text:
            parts[-1][1].append(text)
    return _from_parts(title, "docx", parts)


def _table_rows(table: Any, cell_class: Any, left: int) -> tuple[list[str], int]:
    """The rows of a DOCX table as ``a | b`` lines and the budget left: each ``<w:tc>`` read once (python-docx's
    ``row.cells`` repeats a cell for every column it spans and walks up for every merged row below it, which
    costs as much as the table's area), the continuation of a vertical merge left empty."""
    rows: list[str] = []
    for tr in table._tbl.tr_lst:
        cells: list[str] = []
        for tc in tr.tc_lst:
            if left <= 0:
                break
            left -= 1
            cells.append("" if tc.vMerge == "continue" else cell_class(tc, table).text.strip())
        rows.append(" | ".join(cells))
        if left <= 0:
            break
    return rows, left


# ---- HTML, Markdown, text ----------------------------------------------------------------------


def _html(html: str, name: str, limits: ParseLimits) -> Document:
    from ...runtime.webpage import html_to_text

    notes: list[str] = []
    tags = 0
    for tags, match in enumerate(_TAG.finditer(html), 1):
        if tags > limits.max_elements:
            html, tags = html[:match.start()], tags - 1
            notes.append(f"truncated: only the first {limits.max_elements} HTML tags were read "
                         f"({limits.prefix}_max_elements)")
            break
    if tags > max(1, limits.max_elements // 5) or len(html) > _READABLE_CHARS:  # readability's cost grows faster
        title, body = "", html
        notes.append("the page is large: it was read whole, without picking its main content")
    else:
        title, body = _main_content(html)
    page_title, text = html_to_text(_drop_boilerplate(body))
    if not text.strip() and body is not html:
        page_title, text = html_to_text(html)
    title = title or page_title or _title_of(html)
    parts: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        heading = _HTML_HEADING.match(line.strip())
        if heading:
            parts.append((heading.group(2).strip(), []))
        else:
            parts[-1][1].append(line)
    return _from_parts(title, "html", parts, notes)


def _main_content(html: str) -> tuple[str, str]:
    """``(title, main content)`` of a page by readability-lxml; ``("", html)`` without it or when it fails."""
    try:
        from readability import Document as Readable

        readable = Readable(html)
        title = str(readable.short_title() or "").strip()
        return title, readable.summary(html_partial=True) or html  # without menus and footers
    except ImportError:  # without readability-lxml the whole page is read
        return "", html
    except Exception:  # readability fails on some pages: read the whole page then
        return "", html


def _drop_boilerplate(html: str) -> str:
    """The page without its ``<nav>``, ``<footer>`` and ``<aside>`` elements (readability keeps them on short
    pages), in linear time: each search for a closing tag starts after the last one found, and an element
    that is never closed ends the work."""
    lower = html.lower()
    out: list[str] = []
    pos = 0
    for match in _BOILERPLATE.finditer(html):
        if match.start() < pos:
            continue  # inside an element already dropped
        end = lower.find(f"</{match.group(1).lower()}", match.end())
        if end < 0:
            break
        close = lower.find(">", end)
        out.append(html[pos:match.start()])
        pos = len(html) if close < 0 else close + 1
    out.append(html[pos:])
    return " ".join(out)


def _title_of(html: str) -> str:
    from ...runtime.webpage import html_to_text

    return html_to_text(html[:200_000])[0]


def _markdown(text: str, name: str) -> Document:
    parts: list[tuple[str, list[str], int]] = [("", [], 1)]
    lines = text.split("\n")
    fenced = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _ATX.match(line)
        underline = (not fenced and index + 1 < len(lines) and line.strip() and _SETEXT.match(lines[index + 1])
                     and not line.lstrip().startswith(("-", "*", "+", ">", "|")))
        if heading:
            parts.append((heading.group(2).strip(), [line], index + 1))
        elif underline:
            parts.append((line.strip(), [line], index + 1))
        else:
            parts[-1][1].append(line)
    title = next((t for t, _, _ in parts if t), "")
    sections: list[Section] = []
    for name, body, first in parts:
        content = "\n".join(body).strip("\n")
        if content.strip():
            sections.append(Section(len(sections) + 1, content, name, first_line=first + _leading_blank(body)))
    return Document(title, "markdown", sections)


def _plain(text: str, name: str) -> Document:
    lines = text.rstrip("\n").split("\n")
    sections: list[Section] = []
    for start in range(0, len(lines), _TEXT_LINES_PER_SECTION):
        block = lines[start:start + _TEXT_LINES_PER_SECTION]
        content = "\n".join(block)
        if content.strip():
            sections.append(Section(len(sections) + 1, content, kind="lines", first_line=start + 1))
    first = next((line.strip() for line in lines if line.strip()), "")
    return Document(first[:80] if len(first) <= 80 else "", "text", sections)


def _from_parts(title: str, kind: str, parts: list[tuple[str, list[str]]], notes: list[str] | None = None) -> Document:
    sections: list[Section] = []
    for heading, body in parts:
        content = _tidy("\n".join(body))
        if content or heading:
            sections.append(Section(len(sections) + 1, content, heading))
    return Document(title, kind, sections, list(notes or []))


def _leading_blank(body: list[str]) -> int:
    count = 0
    for line in body:
        if line.strip():
            break
        count += 1
    return count


def _tidy(text: str) -> str:
    text = re.sub(r"[ \t]+\n", "\n", text.replace("\r\n", "\n").replace("\r", "\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _charset(content_type: str) -> str | None:
    match = re.search(r"charset=([\w.:-]+)", content_type or "", re.I)
    return match.group(1) if match else None
