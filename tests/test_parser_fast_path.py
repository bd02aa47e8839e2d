"""The parser's fast path for replies in the prompt's own format gives exactly the full rules' reading.

``_fast_parse`` answers a well-formed reply or returns None; whatever it answers must equal what
``_parse`` (every rule) reads from the same reply, field by field (tool, input, thought, log).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatgpt_tool_hub.engine.parser import Action, Finish, _Broken, _fast_parse, _parse, parse_output

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _cases() -> list:
    cases = []
    for name in ("react_outputs.jsonl", "react_outputs_more.jsonl"):
        for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                cases.append(pytest.param(case, id=case["id"]))
    return cases


def _full(text: str, names: list[str]) -> Action | Finish | str:
    """The full rules' reading, or the kind of format error they report."""
    try:
        return _parse(text, names)
    except _Broken as broken:
        return f"error: {broken.kind}"


def _agrees(text: str, names: list[str] | None = None) -> Action | Finish | None:
    names = names or []
    fast = _fast_parse(text, names)
    if fast is not None:
        assert fast == _full(text, names), f"fast path differs on {text!r}"
    return fast


@pytest.mark.parametrize("case", _cases())
def test_corpus_reading_is_the_same_with_or_without_the_fast_path(case):
    _agrees(case["text"], case.get("tools"))
    _agrees(case["text"], ["search", "Python REPL"])


WELL_FORMED = [  # corpus cases written in the prompt's format: each must take the fast path
    "C01", "C02", "C09", "C10", "C12", "C15", "C16", "C24", "C28", "C29", "C30", "C35", "C39", "C45",
    "P01", "P02", "P05",
]
RECOVERY = [  # cases that need a recovery rule: each must fall through to the full rules
    "C04", "C05", "C06", "C07", "C11", "C13", "C14", "C17", "C18", "C19", "C20", "C21", "C22", "C23",
    "C25", "C26", "C27", "C31", "C32", "C33", "C34", "C36", "C38", "C43", "C44", "P03", "P04", "P06",
]


def _corpus_text(case_id: str) -> str:
    return next(p.values[0]["text"] for p in _cases() if p.values[0]["id"] == case_id)


@pytest.mark.parametrize("case_id", WELL_FORMED)
def test_well_formed_corpus_replies_take_the_fast_path(case_id):
    text = _corpus_text(case_id)
    fast = _agrees(text)
    assert fast is not None
    assert parse_output(text) == fast


@pytest.mark.parametrize("case_id", RECOVERY)
def test_replies_that_need_recovery_fall_through(case_id):
    assert _fast_parse(_corpus_text(case_id), []) is None


def test_the_format_the_prompts_ask_for_takes_the_fast_path():
    action = "Thought: Do I need to use a tool? Yes\nAction: search\nAction Input: weather in SF"
    assert _agrees(action) == Action("search", "weather in SF", "Do I need to use a tool? Yes", action)
    final = "Thought: Do I need to use a tool? No\nAI: It is sunny.\n\nEnjoy the day."
    assert _agrees(final) == Finish("It is sunny.\n\nEnjoy the day.", "Do I need to use a tool? No", final)
    assert _agrees("Final Answer: 42") == Finish("42", "", "Final Answer: 42")
    assert _agrees("Action: Python REPL\nAction Input: print(1)", ["python_repl"]) is not None


NEAR_MISSES = [  # one step from the format: the fast path must fall through or agree
    "Thought: x\nAction: search\nAction Input:** weather",
    "Thought:** x\nAction: search\nAction Input: weather",
    "Thought: x\nAI:** sunny",
    "Thought: x\nAction: search\nAction Input: weather\nObs",
    "Thought: x\nAction: search\nAction Input: weather\n**Observ:",
    "Thought: x\nAction: search\nAction Input: weather\nObservation: rain",
    "Thought: x\nAction: search\nAction Input: weather<|im_end|>",
    "Thought: x\nAI: sunny</s>",
    "<think>Action: rm\nAction Input: -rf</think>\nThought: x\nAI: no",
    "Thought: x\nAI: sunny\n- Action: search\n- Action Input: rain",
    "Thought: x\nAI: sunny\n行动：search\n行动输入：rain",
    "Thought: x\nAI: sunny\nFinal Answer",
    "Thought: x\nAI: sunny\n  aı: again",
    "Thought: x\nThought: y\nAction: search\nAction Input: weather",
    "Observation: old\nAction: search\nAction Input: weather",
    "1. Action: search\nAI: done",
    "```\nThought: x\nAction: search\nAction Input: weather\n```",
    "```\nAction: search\nAction Input: weather\n```",
    "```text\nAI: sunny\n```",
    '{"action": "search", "action_input": "a"}\nAction: search\nAction Input: b',
    'Sure {"action": "search", "action_input": "a"}\nAI: b',
    "Thought: x\nAction: None\nAction Input: N/A",
    "Thought: x\nAction: Final Answer\nAction Input: Paris",
    "Thought: x\nAction: search[rain]\nAction Input: weather",
    'Thought: x\nAction: {"action": "search", "action_input": "q"}\nAction Input: y',
    "Thought: x\nAction: ```json\nAction Input: y",
    "Thought: x\nAction: search\nAction Input: y\n2) Final Answer: z",
    "Thought: x\nAction: search\nAction Input: {\"query\": \"weath",
    "Thought: x\nAction: search\nAction Input: {\"q\": 1}\nmore words",
    "Thought: x\nAction: search\nAction Input:\n```json\n{\"q\": 1}\n```",
    "Thought: x\nAI:",
    "Thought: x\nAI:   \n  ",
    "Thought: x\r\nAction: search\r\nAction Input: weather\r\n",
    "Thought: x\nAction: \u200bsearch\u200b\nAction Input: 'weather'",
    "Thought: x\nAction: my\\_tool\nAction Input: y",
    "Thought: x\nAction: finish\nAction Input: done",
    "Thought: x\nAI: use ```code``` and <b>tags</b>\n```\nAction: not a marker\n```",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_agree_with_the_full_rules(text):
    _agrees(text)
    _agrees(text, ["search", "my_tool", "finish"])


def test_a_stop_word_fragment_after_a_multi_line_answer_is_left_to_the_full_rules():
    text = "Thought: x\nAI: line one\nline two\nObse"
    assert _fast_parse(text, []) is None
    assert parse_output(text) == Finish("line one\nline two", "x", "Thought: x\nAI: line one\nline two")


# --- property: the fast path never reads a reply differently ------------------------------------

_word = st.text("abcxyz北京 .?!'\"-_", min_size=0, max_size=12)
_PIECES = ["\n", "\n\n", " ", "\t", "\r", "\u00a0", "\u200b", "**", "__", "*", "_", "#", "- ", "1. ", "```",
           "```json", "{", "}", '"', "'", "(", ")", "[", "]", ":", "：", "<think>", "</think>", "<|im_end|>",
           "</s>", "Thought:", "thought:", "Action:", "Action Input:", "action input:", "AI:", "ai", "Final Answer",
           "Final Answer:", "Observation:", "Obs", "Observ", "思考：", "行动：", "行动输入：", "最终答案：",
           "search", "None", "finish", "answer-user", '{"action": "search", "action_input": "q"}',
           "Do I need to use a tool? Yes", "Do I need to use a tool? No"]
_tail = st.lists(st.one_of(st.sampled_from(_PIECES), _word), max_size=12).map("".join)


@st.composite
def _replies(draw) -> str:
    """A reply in the prompt's format, often with noise before, inside or after its parts."""
    lead = draw(st.sampled_from(["", "Thought: ", "Thought:", " Thought: ", "Do I need to use a tool? "]))
    lead = "" if not lead else lead + draw(_word) + draw(_tail) + "\n"
    if draw(st.booleans()):
        body = f"Action: {draw(_word)}{draw(_tail)}\nAction Input:{draw(_word)}"
    else:
        body = f"{draw(st.sampled_from(['AI:', 'Final Answer:']))}{draw(_word)}"
    return lead + body + draw(_tail)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_replies(), st.sampled_from([[], ["search"], ["Search", "finish", "None"]]))
def test_fast_path_reading_equals_the_full_rules(text, names):
    _agrees(text, names)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["", "Thought: "]), _word, st.text("abcdefgh_-", min_size=1, max_size=10),
       st.text(st.characters(exclude_characters="\n<{`"), max_size=30), st.booleans())
def test_clean_replies_always_take_the_fast_path(thought_marker, thought, tool, value, final):
    """A one-line thought, a plain tool name and a one-line input (or answer) never need the full rules."""
    lead = f"{thought_marker}{thought}\n" if thought_marker else ""
    text = lead + (f"AI: {value}" if final else f"Action: {tool}\nAction Input: {value}")
    full = _full(text, [])
    if isinstance(full, (Action, Finish)):
        assert _fast_parse(text, []) == full
