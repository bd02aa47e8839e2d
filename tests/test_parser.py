"""The ReAct output parser: the corpus of real malformed outputs, each rule, properties and fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatgpt_tool_hub.engine.parser import FINAL_PREFIXES, FINISH_TOOL_NAMES, Action, Finish, parse_output
from chatgpt_tool_hub.errors import ModelFeedbackError, OutputParserError

CORPUS = Path(__file__).resolve().parent / "fixtures" / "react_outputs.jsonl"
CORPUS_SIZE = 49  # cases in the file; a truncated or emptied copy fails test_the_corpus_is_complete


def _corpus() -> list:
    # No skip when the file is missing: reading it fails collection with the path in the error.
    cases = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [pytest.param(case, id=case["id"]) for case in cases]


def parse(text: str, tool_names=None):
    """parse_output, with the error returned instead of raised."""
    try:
        return parse_output(text, tool_names)
    except OutputParserError as exc:
        return exc


def error_of(text: str, tool_names=None) -> OutputParserError:
    with pytest.raises(OutputParserError) as info:
        parse_output(text, tool_names)
    assert info.value.feedback.strip()
    assert info.value.llm_output == text
    return info.value


def _strip(value):
    return value.strip() if isinstance(value, str) else value


def matches(result, expect: dict) -> bool:
    """The corpus comparison, shared with benchmarks/parser_bench.py."""
    if expect["kind"] == "error":
        return isinstance(result, OutputParserError) and bool(result.feedback.strip())
    if expect["kind"] == "finish":
        return isinstance(result, Finish) and result.output.strip() == expect["output"].strip()
    return (isinstance(result, Action) and result.tool == expect["tool"]
            and _strip(result.tool_input) == _strip(expect["input"]))


# --- the corpus ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", _corpus())
def test_corpus_case(case):
    result = parse(case["text"])
    assert matches(result, case["expect"]), f"{case['id']} ({case['source']}): got {result!r}"


def test_the_corpus_is_complete():
    cases = _corpus()
    ids = [param.id for param in cases]
    assert len(cases) == CORPUS_SIZE, f"{CORPUS} holds {len(cases)} cases, expected {CORPUS_SIZE}"
    assert len(set(ids)) == len(ids), "case ids must be unique (each is its own test id)"
    kinds = {param.values[0]["expect"]["kind"] for param in cases}
    assert kinds == {"action", "finish", "error"}


MORE = Path(__file__).resolve().parent / "fixtures" / "react_outputs_more.jsonl"


def _more() -> list:
    cases = [json.loads(line) for line in MORE.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [pytest.param(c, id=c["id"]) for c in cases]


@pytest.mark.parametrize("case", _more())
def test_real_output_classes_with_their_tool_lists(case):
    """Function calls with keyword arguments, Finish[...], escaped names, JSON actions inside prose."""
    result = parse(case["text"], case["tools"])
    assert matches(result, case["expect"]), f"{case['id']} ({case['source']}): got {result!r}"


# --- the format asked for --------------------------------------------------------------


def test_well_formed_action_with_thought_and_log():
    text = "Thought: Do I need to use a tool? Yes\nAction: search\nAction Input: weather in SF"
    assert parse_output(text) == Action("search", "weather in SF", "Do I need to use a tool? Yes", text)


def test_well_formed_final_answer():
    text = "Thought: Do I need to use a tool? No\nAI: It is sunny."
    assert parse_output(text) == Finish("It is sunny.", "Do I need to use a tool? No", text)


def test_public_constants():
    assert FINAL_PREFIXES == ("AI", "Final Answer")
    assert {"answer-user", "final answer", "final_answer"} <= {n.lower() for n in FINISH_TOOL_NAMES}
    assert issubclass(OutputParserError, ModelFeedbackError)


@pytest.mark.parametrize("prefix", ["AI", "Final Answer", "final answer", "FINAL_ANSWER", "ai"])
def test_both_final_prefixes_in_any_case(prefix):
    assert parse_output(f"Thought: done\n{prefix}: 42") == Finish("42", "done", f"Thought: done\n{prefix}: 42")


@pytest.mark.parametrize("name", ["Final Answer", "final_answer", "answer-user", "ANSWER_USER", "`Final Answer`"])
def test_finish_tool_names_as_action_give_finish(name):
    result = parse_output(f"Thought: done\nAction: {name}\nAction Input: Paris")
    assert result == Finish("Paris", "done", f"Thought: done\nAction: {name}\nAction Input: Paris")


def test_action_final_answer_with_colon_on_one_line():
    assert parse_output("Action: Final Answer: Paris").output == "Paris"


# --- marker normalisation ----------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "thought: x\naction: search\naction input: weather",
    "THOUGHT: x\nACTION: search\nACTION INPUT: weather",
    "Thought：x\nAction：search\nAction Input：weather",
    "Thought : x\nAction  :  search\nAction  Input :weather",
    "**Thought:** x\n**Action:** search\n**Action Input:** weather",
    "**Thought**: x\n**Action**: search\n**Action Input**: weather",
    "Thought 1: x\nAction 1: search\nAction Input 1: weather",
    "   Thought: x\n\t Action: search\n  Action Input: weather",
    "Thought: x\n\n\nAction: search\n\n\nAction Input: weather\n\n",
    "```\nThought: x\nAction: search\nAction Input: weather\n```",
    "```text\nThought: x\nAction: search\nAction Input: weather\n```",
    "Thought: x\r\nAction: search\r\nAction Input: weather\r\n",
    "Thought: x\nAction: search\nAction_Input: weather",
])
def test_marker_variants_read_the_same(text):
    result = parse_output(text)
    assert (result.tool, result.tool_input, result.thought) == ("search", "weather", "x")


@pytest.mark.parametrize("tool", ["`search`", "'search'", '"search"', "**search**", " search "])
def test_tool_name_in_backticks_quotes_or_bold(tool):
    assert parse_output(f"Action: {tool}\nAction Input: weather").tool == "search"


def test_marker_in_the_middle_of_a_line_is_not_a_marker():
    text = "Thought: I could write Action: search here\nFinal Answer: no search"
    assert parse_output(text) == Finish("no search", "I could write Action: search here", text)


def test_think_block_is_dropped_entirely():
    text = "<think>\nAction: delete_all\nAction Input: now\nFinal Answer: nope\n</think>\nThe answer is 4."
    assert parse_output(text) == Finish("The answer is 4.", "", "The answer is 4.")


def test_unclosed_think_block_hides_everything_after_it():
    err = error_of("<think>\nAction: delete_all\nAction Input: now")
    assert "empty" in err.feedback


def test_lone_closing_think_tag_drops_the_reasoning_before_it():
    result = parse_output("I should not run Action: rm\nAction: rm\nAction Input: -rf\n</think>\nAI: 4")
    assert result == Finish("4", "", "AI: 4")


# --- observations --------------------------------------------------------------------------


def test_hallucinated_observation_and_everything_after_it_is_cut():
    text = "Action: search\nAction Input: weather\nObservation: sunny\nThought: done\nAI: sunny"
    result = parse_output(text)
    assert result == Action("search", "weather", "", "Action: search\nAction Input: weather")


@pytest.mark.parametrize("tail", ["Obs", "Observ", "Observation", "observation:", "OBSERVAT"])
def test_trailing_stop_word_fragment_is_cut(tail):
    result = parse_output(f"Action: search\nAction Input: weather\n{tail}")
    assert (result.tool, result.tool_input) == ("search", "weather")


def test_observation_inside_code_fence_is_data():
    text = "AI: Example transcript:\n```\nObservation: 42\n```\nThat is all."
    assert parse_output(text).output == "Example transcript:\n```\nObservation: 42\n```\nThat is all."


def test_only_observation_is_an_error_naming_observation():
    assert "Observation:" in error_of("Observation: the weather is sunny").feedback


def test_fenced_reply_followed_by_observation():
    text = "```\nThought: x\nAction: search\nAction Input: weather\n```\nObservation: sunny"
    assert parse_output(text).tool_input == "weather"


# --- first wins -----------------------------------------------------------------------------


def test_final_answer_before_action_wins_and_is_cut_at_the_action():
    text = "Final Answer: Paris\n\nAction: search\nAction Input: capital of France"
    assert parse_output(text) == Finish("Paris", "", "Final Answer: Paris")


def test_action_before_final_answer_wins():
    result = parse_output("Action: search\nAction Input: x\nAI: done")
    assert (type(result), result.tool, result.tool_input) == (Action, "search", "x")


def test_first_of_two_actions_wins():
    result = parse_output("Action: a\nAction Input: 1\nAction: b\nAction Input: 2")
    assert (result.tool, result.tool_input, result.log) == ("a", "1", "Action: a\nAction Input: 1")


def test_first_of_two_json_blobs_wins():
    text = '{"action": "a", "action_input": "1"}\n{"action": "b", "action_input": "2"}'
    assert (parse_output(text).tool, parse_output(text).tool_input) == ("a", "1")


def test_json_action_after_text_action_loses():
    text = 'Action: a\nAction Input: {"action": "b", "action_input": "2"}'
    assert parse_output(text) == Action("a", {"action": "b", "action_input": "2"}, "", text)


# --- action styles -------------------------------------------------------------------------


@pytest.mark.parametrize("line, tool, tool_input", [
    ("search[weather in SF]", "search", "weather in SF"),
    ('search("weather in SF")', "search", "weather in SF"),
    ("search('weather in SF')", "search", "weather in SF"),
    ("search(weather in SF)", "search", "weather in SF"),
    ('lookup({"q": 1})', "lookup", {"q": 1}),
    ("Python REPL[print(1)]", "Python REPL", "print(1)"),
    ("Final Answer[Paris]", None, "Paris"),
])
def test_react_paper_and_function_call_styles(line, tool, tool_input):
    result = parse_output(f"Thought: x\nAction: {line}")
    if tool is None:
        assert result == Finish(tool_input, "x", f"Thought: x\nAction: {line}")
    else:
        assert (result.tool, result.tool_input) == (tool, tool_input)


def test_action_followed_by_json_blob_on_following_lines():
    text = 'Thought: x\nAction:\n```json\n{\n  "action": "search",\n  "action_input": {"q": "w"}\n}\n```'
    assert parse_output(text) == Action("search", {"q": "w"}, "x", text)


def test_json_blob_on_the_action_line():
    assert parse_output('Action: {"action": "search", "action_input": "w"}').tool_input == "w"


@pytest.mark.parametrize("text, tool, tool_input", [
    ('{"action": "search", "action_input": "w"}', "search", "w"),
    ('```json\n{"action": "search", "action_input": {"k": 3}}\n```', "search", {"k": 3}),
    ('I will search.\n```json\n{"action": "search", "action_input": "w"}\n```', "search", "w"),
    ('{"tool": "search", "tool_input": "w"}', "search", "w"),
    ('{"name": "search", "arguments": "{\\"q\\": \\"w\\"}"}', "search", {"q": "w"}),
    ('{"name": "search", "parameters": {"q": "w"}}', "search", {"q": "w"}),
    ("{'action': 'search', 'action_input': 'w'}", "search", "w"),
    ('{"action": "search", "action_input": null}', "search", ""),
    ('{"action": "search", "action_input": [1, 2]}', "search", "[1, 2]"),
])
def test_json_actions(text, tool, tool_input):
    result = parse_output(text)
    assert (type(result), result.tool, result.tool_input) == (Action, tool, tool_input)


def test_chatgpt_tool_hub_json_action_and_answer_user():
    act = {"thoughts": {"text": "look it up", "speak": "one moment"}, "tool": {"name": "search", "input": "w"}}
    assert parse_output(json.dumps(act)) == Action("search", "w", "look it up", json.dumps(act))
    fin = {"thoughts": {"text": "done"}, "tool": {"name": "answer-user", "input": "It is sunny."}}
    assert parse_output(json.dumps(fin)) == Finish("It is sunny.", "done", json.dumps(fin))


def test_json_final_action_with_dict_input_gives_json_text():
    result = parse_output('{"action": "Final Answer", "action_input": {"a": 1}}')
    assert isinstance(result, Finish) and json.loads(result.output) == {"a": 1}


# --- inputs are kept verbatim ----------------------------------------------------------------


@pytest.mark.parametrize("raw, expected", [
    ('"weather in SF"', "weather in SF"),
    ("'weather in SF'", "weather in SF"),
    ("`ls -la`", "ls -la"),
    ("“weather”", "weather"),
    ('"unbalanced', '"unbalanced'),
    ('say "hi"', 'say "hi"'),
    ('"a" and "b"', '"a" and "b"'),
    ("'it's'", "'it's'"),
    ('git log --pretty=format:"%h %an" --since="date"', 'git log --pretty=format:"%h %an" --since="date"'),
    ("  padded   ", "padded"),
    ("a  b\tc", "a  b\tc"),
    ("ACTION: lower? no, Keep Case", "ACTION: lower? no, Keep Case"),
    ("{not json}", "{not json}"),
    ('{"q": 1} and more', '{"q": 1} and more'),
    ("[1, 2, 3]", "[1, 2, 3]"),
    ("", ""),
])
def test_input_is_verbatim_except_whitespace_fence_and_matching_quotes(raw, expected):
    assert parse_output(f"Action: tool\nAction Input: {raw}").tool_input == expected


@pytest.mark.parametrize("raw, expected", [
    ('{"query": "weather", "k": 3}', {"query": "weather", "k": 3}),
    ("{'pages': ['Coca-Cola'], 'query_str': ''}", {"pages": ["Coca-Cola"], "query_str": ""}),
    ("{'flag': True, 'none': None}", {"flag": True, "none": None}),
    ('{\n  "code": "print(1)"\n}', {"code": "print(1)"}),
    ('```json\n{"q": "w"}\n```', {"q": "w"}),
    ('{"text": "line1\nline2"}', {"text": "line1\nline2"}),
])
def test_object_input_becomes_a_dict(raw, expected):
    assert parse_output(f"Action: tool\nAction Input: {raw}").tool_input == expected


def test_python_literal_input_is_never_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    raw = "{'a': __import__('pathlib').Path(%r).touch()}" % str(marker)
    result = parse_output(f"Action: tool\nAction Input: {raw}")
    assert result.tool_input == raw and not marker.exists()


def test_multiline_input_and_fenced_code_keep_their_lines():
    code = "def f(x):\n    return x * 2\n\nprint(f(21))"
    assert parse_output(f"Action: python\nAction Input:\n```python\n{code}\n```").tool_input == code
    plain = "line one\n  line two\nline three"
    assert parse_output(f"Action: write\nAction Input: {plain}").tool_input == plain


def test_markers_inside_a_code_input_are_code():
    code = "thought: str = 'x'\naction: int = 1\nprint(thought, action)"
    result = parse_output(f"Thought: run it\nAction: python\nAction Input:\n```python\n{code}\n```")
    assert result == Action("python", code, "run it", result.log)


def test_final_answer_keeps_lines_and_inner_code_blocks():
    result = parse_output("AI: Here:\n```python\nprint('hi')\n```\n\nAction: search\nAction Input: x")
    assert result.output == "Here:\n```python\nprint('hi')\n```"  # cut at the hallucinated action
    body = "Steps:\n1. open\n2. close\n```\nAction: example\nAction Input: in a code block\n```\nDone."
    assert parse_output(f"Thought: x\nFinal Answer: {body}").output == body


# --- tool names -------------------------------------------------------------------------------


def test_tool_names_resolve_spelling():
    names = ["Python REPL", "search", "meteo-weather"]
    assert parse_output("Action: python repl\nAction Input: 1", names).tool == "Python REPL"
    assert parse_output("Action: SEARCH\nAction Input: 1", names).tool == "search"
    assert parse_output("Action: meteo_weather\nAction Input: 1", names).tool == "meteo-weather"


def test_unknown_tool_is_not_a_parse_error():
    result = parse_output("Action: Speak\nAction Input: hello", ["search"])
    assert (result.tool, result.tool_input) == ("Speak", "hello")


def test_registered_name_with_brackets_is_not_call_style():
    names = ["search(web)"]
    assert "Action Input" in error_of("Action: search(web)", names).feedback
    assert parse_output("Action: search(web)\nAction Input: w", names).tool == "search(web)"


# --- implicit answers and errors --------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "The capital of France is Paris.",
    "Sure! Here is a list:\n- one\n- two",
    "```python\nprint(1)\n```",
    "Sure: {\"a\": 1} is a dict.",
    "你好！我是LLM-OS。",
])
def test_text_without_markers_is_an_implicit_final_answer(text):
    assert parse_output(text) == Finish(text.strip(), "", text.strip())


def test_tool_no_followed_by_unprefixed_answer_is_accepted():
    result = parse_output("Thought: Do I need to use a tool? No\nParis is the capital.")
    assert result.output == "Paris is the capital." and result.thought == "Do I need to use a tool? No"


@pytest.mark.parametrize("text, needle", [
    ("", "empty"),
    ("   \n\t\n", "empty"),
    ("<think>only thinking</think>", "empty"),
    ("Thought: I should look this up\nAction: search", "'Action: search' but no 'Action Input:'"),
    ("Action Input: weather", "no 'Action:' line"),
    ("Thought: I should look this up.", "neither an 'Action:' line nor an 'AI:' line"),
    ("Do I need to use a tool? No", "no 'AI:' line"),
    ("Thought: Do I need to use a tool? No", "no 'AI:' line"),
    ("Thought: Do I need to use a tool? Yes", "no 'Action:' line"),
    ("Thought: x\nAction: search\nAction Input: {\"query\": \"weath", "cut off"),
    ('{"action": "search", "action_input": "wea', "cut off"),
    ("Action: None\nAction Input: N/A", "'Action: None', which is not a tool"),
    ("Action: N/A\nAction Input: x", "'Action: N/A', which is not a tool"),
    ('{"action": "none", "action_input": "x"}', "which is not a tool"),
    ("Action:\nAction Input: x", "which is not a tool"),
    ('{"foo": 1, "bar": [2]}', '"action" key'),
    ('```json\n{"result": "ok"}\n```', '"action" key'),
    ('{"action": "search"}', 'no "action_input"'),
    ("AI:", "no answer after it"),
    ("Thought: x\nFinal Answer:   \n", "no answer after it"),
    ("Observation: sunny", "Never write 'Observation:'"),
])
def test_errors_name_the_broken_format(text, needle):
    err = error_of(text)
    assert needle in err.feedback
    assert "Action Input:" in err.feedback and "AI:" in err.feedback  # the format to use instead


def test_feedback_lists_the_tool_names_when_given():
    err = error_of("Action: search", ["search", "calculator"])
    assert "search, calculator" in err.feedback
    assert "missing_input" in str(err)


def test_json_errors_show_the_json_format_too():
    assert '"action_input"' in error_of('{"action": "search", "action_input": "wea').feedback


def test_non_string_input_is_an_error_not_a_crash():
    with pytest.raises(OutputParserError, match="empty"):
        parse_output(None)  # type: ignore[arg-type]


# --- properties: noise on markers never changes the reading ------------------------------------

_MARKER_WORDS = ("action", "thought", "observation", "final", "answer", "ai", "think", "need", "obs")
_SAFE = st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp", "Zs"), exclude_characters="`{[(\"'“‘：:*_#<>")
_plain = (st.text(_SAFE, min_size=1, max_size=20)
          .filter(lambda s: not any(w in s.lower() for w in _MARKER_WORDS)))
_phrase = st.lists(_plain, min_size=1, max_size=4).map(" ".join)
_tool = (st.text("abcdefxyz0123-天气查询搜索", min_size=1, max_size=12)
         .filter(lambda s: s.lower() not in {"no", "na", "-", "ai"} and not s.startswith("-")))
_json_value = st.one_of(st.integers(-999, 999), st.booleans(), st.none(), st.text("abc xyz北京", max_size=8))
_dict_input = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=6), _json_value, min_size=1, max_size=4)


@st.composite
def _noise(draw):
    """A function that writes one marker in a randomly noisy but valid way."""
    case = draw(st.sampled_from([str, str.lower, str.upper, str.title, str.swapcase]))
    colon = draw(st.sampled_from([":", "：", " :", "  ："]))
    bold = draw(st.sampled_from(["none", "around", "word"]))
    number = draw(st.sampled_from(["", " 1"]))
    indent = draw(st.sampled_from(["", "  ", "\t"]))

    def write(marker: str) -> str:
        word = case(marker) + (number if marker.startswith("Action") else "")
        if bold == "around":
            return f"{indent}**{word}{colon}**"
        if bold == "word":
            return f"{indent}**{word}**{colon}"
        return f"{indent}{word}{colon}"

    return write


def _render(sections, write=lambda m: f"{m}:", blank="\n") -> str:
    return blank.join(f"{write(marker)} {content}" for marker, content in sections)


@st.composite
def _replies(draw):
    """(clean reply, noisy reply, expected reading)."""
    thought = draw(st.one_of(st.just("Do I need to use a tool? Yes"), _phrase))
    if draw(st.booleans()):
        tool = draw(_tool)
        value = draw(st.one_of(_phrase, _dict_input))
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        sections = [("Thought", thought), ("Action", tool), ("Action Input", shown)]
        expected = ("action", tool, value)
    else:
        prefix = draw(st.sampled_from(FINAL_PREFIXES))
        answer = draw(st.lists(_phrase, min_size=1, max_size=3).map("\n".join))
        sections = [("Thought", "Do I need to use a tool? No"), (prefix, answer)]
        expected = ("finish", None, answer)
    noisy = _render(sections, draw(_noise()), draw(st.sampled_from(["\n", "\n\n", "\n \n"])))
    if draw(st.booleans()):
        noisy = f"```\n{noisy}\n```"
    if draw(st.booleans()):
        noisy += "\nObservation: " + draw(st.text(st.characters(exclude_characters="<"), max_size=30))
    return _render(sections), noisy, expected


def _reading(result):
    if isinstance(result, Action):
        return ("action", result.tool, result.tool_input)
    if isinstance(result, Finish):
        return ("finish", None, result.output)
    return ("error", type(result).__name__, None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_replies())
def test_noise_on_markers_does_not_change_the_reading(reply):
    clean, noisy, expected = reply
    assert _reading(parse(clean)) == expected
    assert _reading(parse(noisy)) == expected


@settings(max_examples=100, deadline=None)
@given(_replies(), st.sampled_from(["search", "Python REPL"]))
def test_tool_names_never_turn_a_reading_into_an_error(reply, extra):
    clean, _, expected = reply
    names = [extra] + ([expected[1]] if expected[1] else [])
    assert _reading(parse(clean, names)) == expected


# --- fuzzing: any string gives Action, Finish or OutputParserError ------------------------------

_FRAGMENTS = ["Action:", "Action Input:", "Thought:", "AI:", "Final Answer:", "Observation:", "Obs", "```",
              "```json", "{", "}", "[", "]", "(", ")", '"', "'", "\\", "<think>", "</think>", "\n", " ", "：",
              "**", "search", "None", "answer-user", '"action": ', '"action_input": ',
              "Do I need to use a tool? No"]


def _check_any(result):
    if isinstance(result, Action):
        assert isinstance(result.tool, str) and result.tool.strip()
        assert isinstance(result.tool_input, (str, dict))
    elif isinstance(result, Finish):
        assert isinstance(result.output, str) and result.output.strip()
    else:
        assert isinstance(result, OutputParserError) and result.feedback.strip()


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.binary().map(lambda b: b.decode("latin-1")),
                 st.lists(st.sampled_from(_FRAGMENTS), max_size=40).map("".join)))
def test_any_text_parses_or_raises_output_parser_error(text):
    _check_any(parse(text))
    _check_any(parse(text, ["search", "Python REPL"]))


@pytest.mark.parametrize("text", [
    "Action: x\n" * 100_000,
    "{" * 100_000,
    "Action Input: " + "[" * 50_000,
    "Action: t\nAction Input: " + "{" * 100_000,
    "Action: t\nAction Input: " + "{[" * 40 + "]}" * 40,
    "Action: t(" + "(" * 100_000 + ")",
    "Action" + " " * 100_000 + "x",
    "<think>" * 100_000,
    "```python\n" * 100_000,
    '{"a": "' + "\\" * 100_000,
    "Observation: x\n" * 100_000,
    "".join(map(chr, range(32))) * 10_000,
    "x" * 1_000_000 + "\nObs",
])
def test_pathological_inputs_finish(text):
    _check_any(parse(text))
