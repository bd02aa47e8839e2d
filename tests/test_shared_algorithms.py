"""Algorithms that several tools use are functions of a lower layer: the map-reduce summary (``llm.summarize``)
and sentence embeddings (``runtime.models.embedding``); no tool builds another tool's class to borrow one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ToolExecutionError
from chatgpt_tool_hub.llm.summarize import COMBINE_PROMPT, MAP_PROMPT, SINGLE_PROMPT, split_text, summarize
from chatgpt_tool_hub.run.budget import Budget
from chatgpt_tool_hub.run.steps import RunUsage
from chatgpt_tool_hub.runtime.models.embedding import DEFAULT_MODEL, Embedder
from chatgpt_tool_hub.runtime.models.manager import ModelManager, default_manager
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import main_tool_register
from chatgpt_tool_hub.tools.base import ToolContext
from chatgpt_tool_hub.tools.builtin.documents_formats import simple_pdf

from helpers import act, answer

PACKAGE = Path(__file__).resolve().parents[1] / "chatgpt_tool_hub"
PARAGRAPH = ("The committee met on Monday to discuss the budget. Revenue grew by twelve percent, costs by four. "
             "The new office in Lyon opens in May and two sales people will be hired. ")
LONG_TEXT = "\n\n".join(f"Section {i}. " + PARAGRAPH * 3 for i in range(8))


def user_prompt(messages: list[dict]) -> str:
    return messages[-1]["content"]


# ---- the map-reduce summary ------------------------------------------------------------------------------


def test_summarize_maps_every_segment_and_combines_in_order():
    chunks = split_text(LONG_TEXT, 120)
    assert len(chunks) > 2
    llm = ScriptedLLM([lambda m: "part summary"] * len(chunks) + ["THE SUMMARY"])
    assert summarize(LONG_TEXT, llm, max_segment_length=120, parallel=1) == "THE SUMMARY"
    prompts = [user_prompt(r) for r in llm.requests]
    assert all(p.startswith(MAP_PROMPT + f"PART {i} OF {len(chunks)}:\n") for i, p in enumerate(prompts[:-1], 1))
    assert prompts[-1].startswith(COMBINE_PROMPT + "PART 1:\npart summary")
    short = ScriptedLLM(["short"])
    assert summarize("One sentence.", short) == "short"
    assert user_prompt(short.requests[0]).startswith(SINGLE_PROMPT + "One sentence.")


def test_summarize_charges_the_budget_counts_usage_and_notes_a_cut():
    usage = RunUsage()
    notes: list[str] = []
    llm = ScriptedLLM([lambda m: "part"] * 2 + ["combined"])
    out = summarize(LONG_TEXT, llm, max_segment_length=120, max_segments=2, usage=usage, notes=notes)
    assert out == "combined" and usage.llm_calls == 3
    assert notes == ["the text was longer than 2 segments of 120 tokens; only the first 2 were summarised "
                     "(summary_max_segments)"]
    with pytest.raises(ToolExecutionError, match="stopped summarising: the budget of 1 LLM calls is used up"):
        summarize(LONG_TEXT, ScriptedLLM([lambda m: "part"] * 20), max_segment_length=120, parallel=1,
                  budget=Budget(max_llm_calls=1))


def test_url_get_and_the_summary_tool_run_the_same_function(monkeypatch):
    """url-get's long-page summary and the summary tool both call ``llm.summarize.summarize``."""
    import chatgpt_tool_hub.tools.builtin.url_get as url_get_module
    import chatgpt_tool_hub.tools.plugins.summary as summary_module

    calls = []

    def fake(text, llm, **limits):
        calls.append(limits)
        return "SUMMARISED"

    monkeypatch.setattr(url_get_module, "summarize", fake)
    monkeypatch.setattr(summary_module, "summarize", fake)
    getter = main_tool_register.build("url-get", url_get_use_summary=True, url_get_max_chars=100,
                                      summary_max_segment_length=700, url_get_summary_max_segments=3)
    notes: list[str] = []
    assert getter._fit("x " * 200, ToolContext(llm=ScriptedLLM([])), notes) == "Summary:\nSUMMARISED"
    summary = main_tool_register.build("summary", summary_max_segment_length=900, summary_parallel=2)
    assert summary.run("Some text.", context=ToolContext(llm=ScriptedLLM([]))) == "SUMMARISED"
    assert [(c["max_segment_length"], c["max_segments"]) for c in calls] == [(700, 3), (900, 30)]
    assert calls[1]["parallel"] == 2


def test_no_tool_module_imports_or_builds_another_tools_class():
    """url-get no longer reaches into the summary plugin, nor the document tools into the experts."""
    for rel, forbidden in (("tools/builtin/url_get.py", ("plugins", "SummaryTool")),
                           ("tools/builtin/documents.py", ("experts", "SentenceSimilarityTool", "build_tool")),
                           ("tools/builtin/documents_index.py", ("experts",))):
        tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        for word in forbidden:
            assert word not in names and not any(word in m.split(".") for m in modules), (rel, word)


def test_read_document_summarises_without_a_summary_tool_in_the_registry(isolated_env):
    (isolated_env / "workspace").mkdir()
    (isolated_env / "workspace" / "notes.pdf").write_bytes(simple_pdf([["Plan", "Open a shop in Lyon in May."]],
                                                                      title="Notes"))
    llm = ScriptedLLM([act("read-document", '{"source": "notes.pdf", "summary": true}'),
                       "A shop opens in Lyon in May.", answer("Lyon, in May.")])
    app = AppFactory().create_app(tools_list=["read-document"], llm=llm, no_default=True, workspace_dir="workspace")
    app.context.registry.unregister_tool("summary")
    result = app.run("Summarise notes.pdf")
    assert result.steps[0].observation == ('Summary of notes.pdf "Notes" (PDF, 1 page):\nA shop opens in Lyon '
                                           'in May.')
    assert result.usage.llm_calls == 3 and "Open a shop in Lyon in May." in user_prompt(llm.requests[1])


# ---- sentence embeddings ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from chatgpt_tool_hub.experts.tiny import BUILDERS

    return BUILDERS["sentence-similarity"](tmp_path_factory.mktemp("encoder"))


def test_an_embedder_without_a_manager_gets_its_own(encoder_dir):
    embedder = Embedder(encoder_dir, device="cpu")
    assert embedder.manager is not default_manager() and embedder.model_configured
    vectors = embedder.embed(["the cat sat", "a dog ran", "the cat sat"], batch=2)
    assert tuple(vectors.shape)[0] == 3 and abs(float(vectors[0] @ vectors[2]) - 1) < 1e-5
    assert embedder.similarities("the cat sat", ["a dog ran", "the cat sat"])[1] == pytest.approx(1, abs=1e-5)
    assert embedder.is_loaded() and embedder.manager.stats()["loads"] == 1
    embedder.close()
    assert not embedder.is_loaded() and embedder.manager.stats()["resident"] == 0
    assert Embedder().model == DEFAULT_MODEL and not Embedder().model_configured


def test_one_app_loads_the_encoder_once_for_the_tool_and_document_qa(encoder_dir, isolated_env):
    (isolated_env / "workspace").mkdir()
    (isolated_env / "workspace" / "garden.md").write_text("# Garden\n\n## Sun\n\nTomatoes want sun.\n\n## Pests\n\n"
                                                          "Hornworms eat the leaves.\n")
    llm = ScriptedLLM([
        act("sentence-similarity", '{"source": "the cat sat", "sentences": ["a dog ran", "the cat sat"]}'),
        act("document-qa", '{"source": "garden.md", "question": "What eats the leaves?", "top_k": 1}'),
        answer("done")])
    app = AppFactory().create_app(tools_list=["sentence-similarity", "document-qa"], llm=llm, no_default=True,
                                  workspace_dir="workspace", sentence_similarity_model=encoder_dir,
                                  expert_device="cpu", document_qa_retrieval="embedding", think_depth=3)
    result = app.run("compare and search")
    assert "Closest: 'the cat sat'" in result.steps[0].observation
    assert "(embedding retrieval, most relevant first)" in result.steps[1].observation
    stats = app.context.models.stats()
    assert stats["loads"] == 1 and stats["resident"] == 1  # one model, one key, in the app's own manager
    qa = next(t for t in app.tools if t.name == "document-qa")
    assert qa.encoder().manager is app.context.models and qa.encoder().model == encoder_dir
    app.close()
    assert app.context.models.stats()["resident"] == 0


def test_document_qa_built_alone_uses_the_shared_manager_of_its_budget(isolated_env):
    alone = main_tool_register.build("document-qa", workspace_dir="workspace")
    assert alone.encoder().manager is default_manager()
    budgeted = main_tool_register.build("document-qa", workspace_dir="workspace", expert_memory_budget_mb=321)
    assert budgeted.encoder().manager.memory_budget_mb == 321 and default_manager().memory_budget_mb == 0
    assert isinstance(budgeted.encoder().manager, ModelManager)
