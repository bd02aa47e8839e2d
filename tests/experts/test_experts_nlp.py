"""Summarization, translation and text2text-generation on tiny BART / NLLB / T5 models; languages; text helpers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.languages import LANGUAGES, find_language, guess_language
from chatgpt_tool_hub.experts.nlp import (
    Seq2SeqModel,
    SummarizationTool,
    Text2TextGenerationTool,
    TranslationTool,
    opus_pair,
)
from chatgpt_tool_hub.experts.textio import count_tokens, split_chunks, text_argument
from chatgpt_tool_hub.experts.tiny import BUILDERS
from chatgpt_tool_hub.runtime.models.manager import ModelManager

SUMMARY = re.compile(r'Summary of the text \((\d+) words\): "(.+)"(\n.*)?', re.S)
TRANSLATION = re.compile(r'Translation from (\w+) into (\w+): "(.+?)"(\n.*)?', re.S)
LONG = "the cat sat on the mat. the dog is on the mat. " * 20  # 480 byte-level tokens, the models read 64


def _built(tmp_path_factory, name: str) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return BUILDERS[name](tmp_path_factory.mktemp(name))


@pytest.fixture(scope="session")
def bart_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "summarization")


@pytest.fixture(scope="session")
def nllb_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "translation")


@pytest.fixture(scope="session")
def t5_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "text2text-generation")


def _spy(tool, calls: list):
    """Record the texts and keyword arguments of every ``generate`` call of the tool's loaded model."""
    model = tool.load()
    original = Seq2SeqModel.generate

    def generate(texts, **kwargs):
        calls.append((list(texts), kwargs))
        return original(model, texts, **kwargs)

    model.generate = generate
    return model


# ---- summarization ---------------------------------------------------------------------------


def test_summarization_end_to_end(bart_dir, workspace):
    tool = SummarizationTool.from_config(summarization_model=bart_dir, expert_device="cpu")
    observation = tool.run("the cat sat on the mat. the dog is on the mat.")
    match = SUMMARY.fullmatch(observation)
    assert match and match.group(1) == "12" and not match.group(3), observation
    assert observation.value == match.group(2)  # the bare summary, for the next task of a plan
    assert tool.model_key == (bart_dir, "summarization", "cpu", "float32")
    assert type(tool.load()).__name__ == "Seq2SeqModel" and tool.load().limit == 64


def test_summarization_of_a_long_text_in_parts(bart_dir, workspace):
    tool = SummarizationTool(model=bart_dir, device="cpu", manager=ModelManager())
    calls: list = []
    _spy(tool, calls)
    observation = tool.run(LONG)
    match = SUMMARY.fullmatch(observation)
    assert match, observation
    assert re.fullmatch(r"\nNote: the text is \d+ tokens long, more than the model's 64: it was summarised in 4 "
                        r"parts; only the first 4 of \d+ parts were summarised \(summarization_max_chunks\)\.",
                        match.group(3))
    texts, kwargs = calls[0]
    assert len(calls) == 1 and len(texts) == 4  # one batch
    assert all(count_tokens(tool.load().tokenizer, [t])[0] <= 62 for t in texts)
    assert all(t.endswith(".") for t in texts)  # cut at sentence ends
    assert kwargs.get("min_length", 0) <= 31  # never a summary longer than half of a piece
    few = SummarizationTool(model=bart_dir, device="cpu", manager=tool.manager, options={"max_chunks": 20})
    note = SUMMARY.fullmatch(few.run(LONG)).group(3)
    assert "only the first" not in note and re.search(r"summarised in \d+ parts\.$", note)


def test_summarization_reads_a_workspace_text_file(bart_dir, workspace):
    (workspace / "docs").mkdir()
    (workspace / "docs" / "report.txt").write_text("the cat sat on the mat.\nthe dog is on the mat.\n")
    tool = SummarizationTool(model=bart_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="file 'docs/ghost.txt' does not exist"):
        tool.run({"text": "docs/ghost.txt"})
    (workspace / "docs" / "empty.txt").write_text("  \n")
    with pytest.raises(ToolInputError, match="'docs/empty.txt' is empty; summarization needs the text"):
        tool.run("docs/empty.txt")
    with pytest.raises(ToolInputError, match=r"summarization needs the text to summarise, e\.g\. \{"):
        tool.run({"text": "   "})
    with pytest.raises(ToolInputError, match="outside the workspace"):
        tool.run({"text": "../outside.txt"})
    assert not tool.is_loaded()  # every bad input is refused before the model loads
    match = SUMMARY.fullmatch(tool.run({"text": "docs/report.txt"}))
    assert match and match.group(1) == "12"


def test_task_specific_params_give_t5_its_prefix(t5_dir, tmp_path):
    folder = tmp_path / "t5-summarizer"
    shutil.copytree(t5_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["task_specific_params"] = {"summarization": {"prefix": "summarize: ", "num_beams": 1,
                                                        "max_length": 10, "min_length": 2}}
    (folder / "config.json").write_text(json.dumps(config))
    tool = SummarizationTool(model=str(folder), device="cpu", manager=ModelManager())
    calls: list = []
    _spy(tool, calls)
    assert SUMMARY.fullmatch(tool.run("the cat sat on the mat"))
    texts, kwargs = calls[0]
    assert texts == ["summarize: the cat sat on the mat"]
    assert kwargs["max_length"] == 10 and kwargs["num_beams"] == 1 and kwargs["min_length"] == 2


# ---- translation -----------------------------------------------------------------------------


def test_translation_with_nllb_codes(nllb_dir, workspace):
    tool = TranslationTool.from_config(translation_model=nllb_dir, expert_device="cpu")
    calls: list = []
    model = _spy(tool, calls)
    observation = tool.run({"text": "the cat sat on the mat", "target": "Chinese"})
    match = TRANSLATION.fullmatch(observation)
    assert match and match.group(1, 2) == ("English", "Chinese"), observation
    assert observation.value == match.group(3)
    assert match.group(4) == ('\nNote: the text was taken to be English (Latin script); give "source" if it is '
                              'in another language.')
    assert calls[-1][1]["forced_bos_token_id"] == model.tokenizer.convert_tokens_to_ids("zho_Hans")
    assert model.tokenizer.src_lang == "eng_Latn"
    observation = tool.run({"text": "你好，世界", "target": "fr"})  # the source is guessed from the script
    assert TRANSLATION.fullmatch(observation).group(1, 2, 4) == ("Chinese", "French", None)
    assert model.tokenizer.src_lang == "zho_Hans"
    assert calls[-1][1]["forced_bos_token_id"] == model.tokenizer.convert_tokens_to_ids("fra_Latn")
    assert TRANSLATION.fullmatch(tool.run({"text": "你好"})).group(2) == "English"  # target: English by default
    given = tool.run({"text": "the cat", "target": "deu_Latn", "source": "French"})
    assert TRANSLATION.fullmatch(given).group(1, 2, 4) == ("French", "German", None)
    unnamed = tool.run({"text": "the cat", "target": "ace_Latn"})  # an NLLB code outside the table of names
    assert TRANSLATION.fullmatch(unnamed).group(2) == "ace_Latn"
    assert calls[-1][1]["forced_bos_token_id"] == model.tokenizer.convert_tokens_to_ids("ace_Latn")


def test_translation_input_errors(nllb_dir, workspace):
    tool = TranslationTool(model=nllb_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match=r"unknown target language 'Klingon'; use a name or code such as: "
                                             r"English, Chinese, "):
        tool.run({"text": "hello", "target": "Klingon"})
    with pytest.raises(ToolInputError, match="unknown source language 'elvish'"):
        tool.run({"text": "hello", "target": "fr", "source": "elvish"})
    with pytest.raises(ToolInputError, match='needs the language to translate into, e.g. .*"target": "French"'):
        tool.run({"text": "hello there"})
    with pytest.raises(ToolInputError, match="translation needs the text to translate"):
        tool.run({"text": "", "target": "fr"})
    assert not tool.is_loaded()


def test_translation_of_a_long_text_in_parts(nllb_dir, workspace):
    tool = TranslationTool(model=nllb_dir, device="cpu", manager=ModelManager(), options={"max_chunks": 3})
    calls: list = []
    _spy(tool, calls)
    match = TRANSLATION.fullmatch(tool.run({"text": LONG, "target": "German"}))
    assert match and re.search(r"\nNote: the text is \d+ tokens long, more than the model's 64: it was translated in "
                               r"3 parts; only the first 3 of \d+ parts were translated \(translation_max_chunks\)\.$",
                               match.group(4))
    texts, kwargs = calls[0]
    assert len(texts) == 3 and kwargs["max_new_tokens"] <= 64


def test_translation_with_a_t5_prompt(t5_dir, workspace):
    tool = TranslationTool(model=t5_dir, device="cpu", manager=ModelManager(), options={"max_new_tokens": 4})
    calls: list = []
    _spy(tool, calls)
    match = TRANSLATION.fullmatch(tool.run({"text": "the cat sat", "target": "German"}))
    assert match and match.group(1, 2) == ("English", "German")
    assert calls[0][0] == ["translate English to German: the cat sat"]
    assert "forced_bos_token_id" not in calls[0][1] and calls[0][1]["max_new_tokens"] == 4


def test_opus_pairs_are_checked_before_loading(workspace):
    assert opus_pair("Helsinki-NLP/opus-mt-en-zh") == ("en", "zh")
    assert opus_pair("Helsinki-NLP/opus-mt-tc-big-en-fr") == ("en", "fr")
    assert opus_pair("/models/opus-mt-de-en") == ("de", "en")
    assert opus_pair("facebook/nllb-200-distilled-600M") is None
    tool = TranslationTool.from_config(translation_model="Helsinki-NLP/opus-mt-en-zh")
    with pytest.raises(ToolInputError, match=r"Helsinki-NLP/opus-mt-en-zh translates en into zh only, not into French "
                                             r"\(fr\); set translation_model to a model for that pair "
                                             r"\(Helsinki-NLP/opus-mt-en-fr\), to Helsinki-NLP/opus-mt-\{source\}-"
                                             r"\{target\}"):
        tool.run({"text": "hello", "target": "French"})
    assert not tool.is_loaded()


def test_a_translation_model_template_is_filled_per_call(nllb_dir, tmp_path, workspace):
    shutil.copytree(nllb_dir, tmp_path / "opus-mt-en-de")
    template = str(tmp_path / "opus-mt-{source}-{target}")
    tool = TranslationTool(model=template, device="cpu", manager=ModelManager())
    assert TRANSLATION.fullmatch(tool.run({"text": "the cat", "target": "German"})).group(1, 2) == ("English",
                                                                                                 "German")
    assert tool.manager.is_loaded((str(tmp_path / "opus-mt-en-de"), "translation", "cpu", "float32"))
    with pytest.raises(ToolExecutionError, match=r"opus-mt-en-fr.* no such folder; set translation_model"):
        tool.run({"text": "the cat", "target": "French"})
    bad = TranslationTool(model=str(tmp_path / "opus-{source}-{lang}"), device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match=r"may hold only \{source\} and \{target\}"):
        bad.run({"text": "the cat", "target": "French"})


def test_translation_remote(fake_endpoint, workspace):
    fake_endpoint.reply_json([{"translation_text": "Où est la gare ?"}])
    tool = TranslationTool.from_config(translation_endpoint=fake_endpoint.url)
    observation = tool.run({"text": "Where is the station?", "target": "French"})
    assert observation.splitlines()[0] == 'Translation from English into French: "Où est la gare ?"'
    assert observation.value == "Où est la gare ?"
    assert json.loads(fake_endpoint.requests[0]["body"]) == {
        "inputs": "Where is the station?", "parameters": {"src_lang": "eng_Latn", "tgt_lang": "fra_Latn"}}


# ---- text2text-generation --------------------------------------------------------------------


def test_text2text_generation_and_a_long_input(t5_dir, workspace):
    tool = Text2TextGenerationTool.from_config(text2text_generation_model=t5_dir, expert_device="cpu",
                                               text2text_generation_max_new_tokens=5)
    observation = tool.run("translate English to German: the cat")
    match = re.fullmatch(r'Generated text: "(.+)"', observation)
    assert match and observation.value == match.group(1)
    assert len(tool.load().tokenizer(match.group(1), add_special_tokens=False)["input_ids"]) <= 5
    long = tool.run({"text": "the cat sat on the mat " * 20})
    assert long.splitlines()[-1] == ("Note: the text is 120 tokens long; text2text-generation read only the first 63 "
                                     "tokens (the model's limit). Split the text to cover the rest.")
    assert long.startswith('Generated text: "')


def test_summarization_remote_and_empty_answers(fake_endpoint, workspace):
    fake_endpoint.reply_json([{"summary_text": "A tall tower."}])
    fake_endpoint.reply_json([{"summary_text": ""}])
    tool = SummarizationTool.from_config(summarization_endpoint=fake_endpoint.url)
    observation = tool.run("The tower is 324 metres tall.")
    assert observation == 'Summary of the text (6 words): "A tall tower."' and observation.value == "A tall tower."
    assert json.loads(fake_endpoint.requests[0]["body"]) == {"inputs": "The tower is 324 metres tall."}
    assert tool.run("The tower is tall.") == "The model wrote no summary of the text (4 words)."


@pytest.mark.parametrize("cls", [SummarizationTool, TranslationTool, Text2TextGenerationTool])
def test_a_missing_model_folder_names_the_setting(cls, tmp_path, workspace):
    key = cls.name.replace("-", "_") + "_model"
    tool = cls.from_config(**{key: str(tmp_path / "nothing-here"), "expert_device": "cpu"})
    with pytest.raises(ToolExecutionError, match=rf"could not load model .*nothing-here.* for {cls.name}: no such "
                                                 rf"folder; set {key} to a folder made by save_pretrained"):
        tool.run({"text": "hello", "target": "fr"} if cls is TranslationTool else "hello")


# ---- through the apps ------------------------------------------------------------------------


def test_a_plan_hands_the_bare_summary_to_the_translation(bart_dir, nllb_dir, workspace):
    from chatgpt_tool_hub.apps import PlannerApp
    from chatgpt_tool_hub.testing import ScriptedLLM

    plan = json.dumps([
        {"task": "summarization", "id": 0, "dep": [-1], "args": {"text": "the cat sat on the mat. the dog is on "
                                                                          "the mat."}},
        {"task": "translation", "id": 1, "dep": [0], "args": {"text": "<resource>-0", "target": "German"}}])
    llm = ScriptedLLM([plan, "Here is the German summary."])
    tools = [SummarizationTool.from_config(summarization_model=bart_dir, expert_device="cpu"),
             TranslationTool.from_config(translation_model=nllb_dir, expert_device="cpu")]
    result = PlannerApp(llm, tools).run("summarise this and give it to me in German")
    assert result.output == "Here is the German summary."
    assert [result.tasks[i].status for i in (0, 1)] == ["ok", "ok"]
    summary = result.tasks[0].resource
    assert summary == SUMMARY.fullmatch(result.tasks[0].output).group(2)  # the bare summary, not the sentence
    assert result.tasks[1].args["text"] == summary
    assert TRANSLATION.fullmatch(result.tasks[1].output).group(2) == "German"


def test_summarization_through_a_react_app(bart_dir, workspace):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: summarization\nAction Input: {"text": ""}',
        'Thought: Do I need to use a tool? Yes\nAction: summarization\nAction Input: {"text": "the cat sat on the '
        'mat. the dog is on the mat."}',
        "Thought: Do I need to use a tool? No\nAI: done",
    ])
    tool = SummarizationTool.from_config(summarization_model=bart_dir, expert_device="cpu")
    app = AppFactory().create_app(tools_list=[tool], llm=llm, no_default=True)
    assert app.ask("summarise the story") == "done"
    assert "summarization needs the text to summarise" in llm.requests[1][-1]["content"]
    assert SUMMARY.search(llm.requests[2][-1]["content"])


# ---- languages and text helpers ---------------------------------------------------------------


def test_languages_by_name_code_and_script():
    assert find_language("Chinese").nllb == "zho_Hans" and find_language("zh-CN").name == "Chinese"
    assert find_language("zho_Hant").name == "Traditional Chinese" and find_language("ZH").name == "Chinese"
    assert find_language("en-US").iso == "en" and find_language(" farsi ").nllb == "pes_Arab"
    assert find_language("de_DE").name == "German" and find_language("klingon") is None
    assert all(find_language(lang.nllb) is lang for lang in LANGUAGES)
    assert len({lang.nllb for lang in LANGUAGES}) == len(LANGUAGES)
    for text, name in [("hello", "English"), ("Bonjour", "English"), ("你好世界", "Chinese"),
                       ("こんにちは世界", "Japanese"), ("日本語のテキスト", "Japanese"), ("안녕하세요", "Korean"),
                       ("Привет", "Russian"), ("Привіт, їжак", "Ukrainian"), ("مرحبا", "Arabic"),
                       ("नमस्ते", "Hindi"), ("Γειά σου", "Greek")]:
        assert guess_language(text).name == name, text


def test_split_chunks_prefers_sentence_ends(bart_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bart_dir)
    text = "the cat sat on the mat. " * 6 + "a" * 30 + " " + "b " * 40
    chunks = split_chunks(tokenizer, text, 20)
    assert all(count_tokens(tokenizer, [c])[0] <= 20 for c in chunks)
    assert chunks[:3] == ["the cat sat on the mat. the cat sat on the mat."] * 3  # 14 tokens: a third is too many
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")  # nothing lost, nothing repeated
    assert split_chunks(tokenizer, "short", 20) == ["short"]


def test_text_argument(workspace):
    (workspace / "notes.md").write_text("# title\nbody\n")
    (workspace / "blob.txt").write_bytes(b"\x00\x01binary")
    args = dict(tool="t", what="a text", example='{"text": "x"}')
    assert text_argument("notes.md", workspace, **args) == "# title\nbody"
    assert text_argument("  plain words.  ", workspace, **args) == "plain words."
    assert text_argument("see notes.md for more", workspace, **args) == "see notes.md for more"  # not a file name
    with pytest.raises(ToolInputError, match="'blob.txt' is not a text file"):
        text_argument("blob.txt", workspace, **args)
    with pytest.raises(ToolInputError, match=r'^t needs a text, e\.g\. \{"text": "x"\}$'):
        text_argument(None, workspace, **args)


LIGHT = """
import sys
from chatgpt_tool_hub.experts.nlp import SummarizationTool, Text2TextGenerationTool, TranslationTool
from chatgpt_tool_hub.experts.qa import QuestionAnsweringTool
from chatgpt_tool_hub.experts.similarity import SentenceSimilarityTool
from chatgpt_tool_hub.experts.text import TokenClassificationTool, ZeroShotClassificationTool
from chatgpt_tool_hub.experts.audio_tasks import AudioClassificationTool, AudioToAudioTool
tools = [c.from_config() for c in (SummarizationTool, Text2TextGenerationTool, TranslationTool, QuestionAnsweringTool,
         SentenceSimilarityTool, TokenClassificationTool, ZeroShotClassificationTool, AudioClassificationTool,
         AudioToAudioTool)]
print(len(tools), sorted(m for m in ("torch", "transformers", "numpy", "PIL") if m in sys.modules))
"""


def test_building_the_tools_imports_nothing_heavy(tmp_path):
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "9 []"


@pytest.mark.slow
def test_the_docs_page_runs(tmp_path):
    """The ``# runnable`` blocks of docs/experts/text-and-audio.md run as written (offline, tiny models)."""
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "experts" / "text-and-audio.md"
    blocks = [b for b in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
              if b.startswith("# runnable")]
    assert blocks
    root = str(Path(__file__).resolve().parents[2])
    for block in blocks:
        out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120,
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": root, "HF_HUB_OFFLINE": "1"})
        assert out.returncode == 0, out.stderr[-2000:]
        assert "Here it is in German." in out.stdout


def test_a_model_for_another_task_is_named_in_the_error(tmp_path, workspace):
    pytest.importorskip("transformers")
    encoder = BUILDERS["sentence-similarity"](tmp_path / "encoder")  # a BERT encoder: no seq2seq head
    tool = SummarizationTool(model=encoder, device="cpu", manager=ModelManager())
    with pytest.raises(ToolExecutionError, match=r"could not load model .* for summarization: .*; set "
                                                 r"summarization_model to a model that supports the "
                                                 r"'summarization' task"):
        tool.run("the cat sat on the mat")
