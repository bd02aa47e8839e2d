"""Documents as pages and sections: PDF (pypdf), DOCX (python-docx), HTML (readability-lxml), Markdown, text.

:func:`parse_document` turns a file's bytes into a :class:`Document`: a title,
a kind and a list of :class:`Section` objects, each with the reference a
citation uses (``page 3`` for a PDF; ``section 2 "Methods"`` for DOCX, HTML
and Markdown, split at their headings; ``lines 1-40`` for plain text). The
format is found from the content itself (``%PDF``, a ZIP holding
``word/document.xml``, an ``<html>`` start), then the file name or the
content type. Every reader is bounded: ``max_pages`` pages of a PDF, a DOCX
whose unpacked parts exceed ``MAX_UNPACKED_BYTES`` is refused before it is
read, and a format library that is missing or fails becomes a
``ToolExecutionError`` / ``ToolInputError`` naming the extra to install, never
a traceback. The libraries are imported on first use only.
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

__all__ = ["Document", "Section", "parse_document", "detect_kind", "simple_pdf", "DOCUMENTS_HINT", "KINDS",
           "MAX_UNPACKED_BYTES"]

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


def parse_document(data: bytes, name: str = "", content_type: str = "", *, max_pages: int = 500) -> Document:
    """``data`` as a :class:`Document` (see the module docstring)."""
    kind = detect_kind(data, name, content_type)
    charset = _charset(content_type)
    if kind == "pdf":
        return _pdf(data, name, max_pages)
    if kind == "docx":
        return _docx(data, name)
    if kind == "html":
        return _html(decode_text(data, charset, html=True, guess=True), name)
    text = decode_text(data, charset, guess=True).replace("\r\n", "\n").replace("\r", "\n")
    if kind == "markdown":
        return _markdown(text, name)
    return _plain(text, name)


# ---- PDF -------------------------------------------------------------------------------------


def _pdf(data: bytes, name: str, max_pages: int) -> Document:
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
    for number, page in enumerate(pages[:max_pages], 1):
        try:
            text = page.extract_text() or ""
        except Exception as exc:
            text = ""
            document.notes.append(f"the text of page {number} could not be read ({type(exc).__name__})")
        document.sections.append(Section(number, _tidy(text), kind="page"))
    if len(pages) > max_pages:
        document.notes.append(f"only the first {max_pages} of {len(pages)} pages were read (read_document_max_pages)")
    if pages and not any(section.text for section in document.sections):
        document.notes.append("the PDF has no text layer (a scan?): run an OCR tool on its pages first")
    return document


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


def _docx(data: bytes, name: str) -> Document:
    try:
        import docx
        from docx.table import Table
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
    for block in blocks:
        if isinstance(block, Table):
            rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in block.rows]
            parts[-1][1].append("\n".join(rows))
            continue
        text = block.text.strip()
        style = str(getattr(block.style, "name", "") or "")
        if text and (style.startswith("Heading") or style == "Title"):
            if style == "Title" and not title:
                title = text
            parts.append((text, []))
        elif text:
            parts[-1][1].append(text)
    return _from_parts(title, "docx", parts)


# ---- HTML, Markdown, text ----------------------------------------------------------------------


def _html(html: str, name: str) -> Document:
    from ...runtime.webpage import html_to_text

    title, body = "", html
    try:
        from readability import Document as Readable

        readable = Readable(html)
        title = str(readable.short_title() or "").strip()
        body = readable.summary(html_partial=True) or html  # the main content, without menus and footers
    except ImportError:  # without readability-lxml the whole page is read
        pass
    except Exception:  # readability fails on some pages: read the whole page then
        body = html
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
    return _from_parts(title, "html", parts)


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


def _from_parts(title: str, kind: str, parts: list[tuple[str, list[str]]]) -> Document:
    sections: list[Section] = []
    for heading, body in parts:
        content = _tidy("\n".join(body))
        if content or heading:
            sections.append(Section(len(sections) + 1, content, heading))
    return Document(title, kind, sections)


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
