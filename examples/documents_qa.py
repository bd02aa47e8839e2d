"""Long documents: read a PDF by pages, find the passage that answers a question, summarise a Word file.

Run it from the repository root (no key, no network):

    python examples/documents_qa.py

It writes a three-page PDF, a Word document and an HTML page into a
temporary workspace, then a ScriptedLLM drives the read-document,
document-qa and summary tools of an app: the outline and pages of the PDF,
the passages that answer a question (ranked by the MiniLM sentence encoder
when the planner extra is installed, else by BM25), and a summary of the
Word document by the summary tool (the scripted "model" writes it). With a
real LLM the model picks the calls itself. Needs the documents extra:
pip install "chatgpt-tool-hub[documents]".
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.builtin.documents_formats import simple_pdf

PAGES = [
    ["Annual report 2025", "The company makes garden tools and sells them in 14 countries."],
    ["Revenue", "Revenue grew to 4.2 million dollars in 2025, up 12 percent on 2024.",
     "Most of the growth came from the new line of electric hedge trimmers."],
    ["Outlook", "For 2026 the board expects revenue of 4.8 million dollars and two new shops."],
]
HTML = """<html><head><title>Tool care</title></head><body><nav>Home | Shop | About</nav><main>
<h1>Caring for garden tools</h1><p>Clean the blades after every use and dry them well.</p>
<h2>Sharpening</h2><p>Sharpen pruners twice a season with a fine whetstone held at twenty degrees.</p>
<h2>Storage</h2><p>Store the tools in a dry shed, hanging, with a thin coat of oil on the metal.</p>
</main><footer>All rights reserved.</footer></body></html>"""


def write_files(workspace: Path) -> None:
    (workspace / "report.pdf").write_bytes(simple_pdf(PAGES, title="Annual report 2025"))
    (workspace / "care.html").write_text(HTML, encoding="utf-8")
    import docx

    word = docx.Document()
    word.add_heading("Meeting notes", 0)
    word.add_paragraph("The team met on 3 March to plan the spring season.")
    word.add_heading("Decisions", 1)
    word.add_paragraph("Open a shop in Lyon in May. Hire two sales people. Stop selling petrol mowers.")
    word.add_heading("Next steps", 1)
    word.add_paragraph("Anna writes the job ads; Ben finds a place for the shop.")
    word.save(workspace / "notes.docx")


def action(tool: str, arguments: dict) -> str:
    return f"Action: {tool}\nAction Input: {json.dumps(arguments)}"


def main() -> None:
    workspace = Path(tempfile.mkdtemp(prefix="tool-hub-documents-"))
    write_files(workspace)
    llm = ScriptedLLM([
        action("read-document", {"source": "report.pdf", "pages": "2"}),
        action("document-qa", {"source": "report.pdf", "question": "How much revenue is expected next year?",
                               "top_k": 2}),
        action("document-qa", {"source": "care.html", "question": "How should I store my tools?", "top_k": 1}),
        "AI: The report expects 4.8 million dollars in 2026 (page 3); store tools dry and oiled.",
        action("read-document", {"source": "notes.docx", "summary": True}),
        "A shop opens in Lyon in May, two sales people are hired and petrol mowers are dropped.",  # the summary
        "AI: The team decided to open a shop in Lyon, hire two people and stop petrol mowers.",
    ])
    app = AppFactory().create_app(tools_list=["read-document", "document-qa", "summary"], llm=llm,
                                  no_default=True, workspace_dir=str(workspace), think_depth=5)
    result = app.run("What does the report expect for 2026, and how do I store my tools?")
    for step in result.steps:
        print(f"--- {step.tool} {json.dumps(step.tool_input) if isinstance(step.tool_input, dict) else step.tool_input}")
        print(step.observation)
    print("answer:", result.output)
    summary = app.run("Summarise the meeting notes")
    print("---", summary.steps[0].tool)
    print(summary.steps[0].observation)
    print("answer:", summary.output)
    print(f"LLM calls: {result.usage.llm_calls} + {summary.usage.llm_calls} (the summary's call included)")
    app.close()


if __name__ == "__main__":
    main()
