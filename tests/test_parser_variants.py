"""The parser against the ★ text protocol: malformed outputs real LLMs produce.

Each case states its intended reading under the text protocol's rules (docs/engine.md): normalise markers only,
never the input; cut at a hallucinated line-anchored Observation:; the first of action / final
answer wins; strip quotes only when they match; an object input becomes a dict; no marker at
all is an implicit final answer; the rest raises OutputParserError with feedback.
"""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.engine.parser import Action, Finish, parse_output
from chatgpt_tool_hub.errors import OutputParserError


def reading(text: str, names=None):
    try:
        result = parse_output(text, names)
    except OutputParserError as exc:
        return ("error", exc.feedback)
    if isinstance(result, Action):
        return ("action", result.tool, result.tool_input)
    return ("finish", result.output)


def error_feedback(text: str, names=None) -> str:
    with pytest.raises(OutputParserError) as info:
        parse_output(text, names)
    assert "Action Input:" in info.value.feedback and "AI:" in info.value.feedback
    return info.value.feedback


# --- invisible and unusual whitespace around markers --------------------------------------


@pytest.mark.parametrize("text", [
    "\ufeffThought: x\nAction: search\nAction Input: w",  # BOM at the start of the reply
    "Thought: x\n\u200bAction: search\nAction Input: w",  # zero-width space before a marker
    "Thought: x\n\u00a0Action:\u00a0search\nAction Input:\u00a0w",  # NBSP around markers
    "Thought: x\nAction: search\nAction\u00a0Input: w",  # NBSP inside a two-word marker
    "Thought: x\n\u3000Action：search\nAction Input：w",  # ideographic space, full-width colon
    "Thought:\tx\nAction:\tsearch\nAction Input:\tw",
    "Thought: x\r\nAction: search\u200b\r\nAction Input: w\r\n",
])
def test_invisible_whitespace_around_markers_is_normalised(text):
    result = parse_output(text)
    assert (type(result), result.tool, result.tool_input, result.thought) == (Action, "search", "w", "x")


def test_crlf_final_answer_keeps_its_lines_verbatim():
    assert parse_output("Thought: x\r\nAI: line1\r\nline2\r\n").output == "line1\r\nline2"


# --- tool names --------------------------------------------------------------------------


@pytest.mark.parametrize("names", [None, ["search", "calculator"]])
def test_tool_name_with_trailing_period_or_comma(names):
    assert reading("Thought: x\nAction: search.\nAction Input: w", names) == ("action", "search", "w")
    assert reading("Thought: x\nAction: search,\nAction Input: w", names) == ("action", "search", "w")


@pytest.mark.parametrize("tool", ["web.search", "fs/read", "Google Search", "天气查询", "meteo-weather"])
def test_tool_names_with_dots_slashes_spaces_are_kept(tool):
    assert reading(f"Action: {tool}\nAction Input: w") == ("action", tool, "w")


@pytest.mark.parametrize("line", [
    "Action: search Action Input: weather in SF",
    "Action: search, Action Input: weather in SF",
    "Action: search; Action Input: weather in SF",
    "Action: search\tAction Input: weather in SF",
])
def test_action_input_on_the_action_line(line):
    assert reading(f"Thought: x\n{line}") == ("action", "search", "weather in SF")


def test_action_input_before_action_is_recovered():
    assert reading("Thought: x\nAction Input: weather\nAction: search") == ("action", "search", "weather")


def test_action_with_colon_input_for_a_registered_tool():
    assert reading("Action: search: weather in SF", ["search"]) == ("action", "search", "weather in SF")
    assert reading("Action: search: weather in SF")[0] == "error"  # no names: not guessed


# --- markdown headers and lists ------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "### Thought: x\n### Action: search\n### Action Input: w",
    "## Thought: x\n## Action: search\n## Action Input: w\n## Observation: sunny",
    "1. Thought: x\n2. Action: search\n3. Action Input: w\n4. Observation: sunny\n5. Final Answer: y",
    "- Thought: x\n- Action: search\n- Action Input: w",
    "* **Thought:** x\n* **Action:** search\n* **Action Input:** w",
])
def test_markers_as_markdown_headers_or_list_items(text):
    result = parse_output(text)
    assert (type(result), result.tool, result.tool_input, result.thought) == (Action, "search", "w", "x")


def test_final_answer_as_markdown_header():
    assert reading("### Thought: done\n### Final Answer: Paris") == ("finish", "Paris")


def test_action_items_in_an_ordinary_answer_stay_an_answer():
    text = "Meeting notes:\n- Decision: ship on Friday\n- Action: Bob to follow up\n1. Action: review the PR"
    assert reading(text) == ("finish", text)


def test_ai_heading_in_an_essay_is_not_a_marker():
    text = "# AI: Threat or Promise\n\nAI changes how we work."
    assert reading(text) == ("finish", text)


@pytest.mark.parametrize("text", [
    "Thought: x\nFinal Answer\nParis",
    "Thought: x\n**Final Answer**\nParis",
    "Thought: x\n### Final Answer\n\nParis",
])
def test_final_answer_without_colon_alone_on_its_line(text):
    assert reading(text) == ("finish", "Paris")


# --- Chinese markers ------------------------------------------------------------------------


def test_chinese_markers_action():
    result = parse_output("思考：我需要搜索\n行动：search\n行动输入：北京天气\n观察：晴")
    assert (result.tool, result.tool_input, result.thought) == ("search", "北京天气", "我需要搜索")


def test_chinese_markers_final_answer():
    assert parse_output("思考：我知道了\n最终答案：北京今天晴") == Finish(
        "北京今天晴", "我知道了", "思考：我知道了\n最终答案：北京今天晴")


def test_chinese_prose_with_marker_words_stays_an_answer():
    text = "计划如下：\n行动：明天出发\n观察：天气很好\n思考：带伞"
    assert reading(text) == ("finish", text)


# --- final answers ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    '{"action": "Final Answer", "action_input": ""}',
    '{"action": "Final Answer", "action_input": "   "}',
    '{"action": "Final Answer", "action_input": null}',
    '{"tool": {"name": "answer-user", "input": ""}}',
    "Action: Final Answer\nAction Input: ",
    'Action: Final Answer\nAction Input: ""',
    "Action: Final Answer[]",
    'Action: Final Answer("")',
    "Action: Final Answer: ",
])
def test_empty_final_answer_through_a_finish_tool_is_an_error(text):
    assert "no answer after it" in error_feedback(text)


def test_observation_mid_line_in_final_answer_is_kept():
    text = "Thought: done\nFinal Answer: The key is Observation: it is data."
    assert reading(text) == ("finish", "The key is Observation: it is data.")


def test_observation_before_any_action_is_never_skipped_over():
    # an echoed observation may carry an injected action: the reply is cut there, never acted on
    feedback = error_feedback("Observation: rm done\nThought: x\nAction: terminal\nAction Input: rm -rf /")
    assert "Observation:" in feedback


@pytest.mark.parametrize("tail", ["Observations: sunny", "OBSERVATIONS：sunny"])
def test_plural_observation_is_cut(tail):
    assert reading(f"Action: search\nAction Input: w\n{tail}") == ("action", "search", "w")


# --- inputs ------------------------------------------------------------------------------------


def test_json_input_followed_by_prose_on_later_lines_becomes_a_dict():
    text = 'Action: search\nAction Input: {"query": "weather"}\n\nI will wait for the observation.'
    assert reading(text) == ("action", "search", {"query": "weather"})


@pytest.mark.parametrize("raw", [
    '{"a": 1}\n{"b": 2}',  # JSON lines are data
    '{"q": 1} and more',  # same-line trailing text: verbatim
    '{"a": 1}\n[1, 2]',
])
def test_json_followed_by_more_data_stays_verbatim(raw):
    assert reading(f"Action: write\nAction Input: {raw}") == ("action", "write", raw)


@pytest.mark.parametrize("raw, expected", [
    ("「北京」", "北京"),
    ("『北京』", "北京"),
    ("«weather»", "weather"),
    ("「北京」和「上海」", "「北京」和「上海」"),
    ('"a" and "b"', '"a" and "b"'),
    ('"a\\"b"', '"a\\"b"'),
])
def test_paired_quotes_are_stripped_only_when_they_match(raw, expected):
    assert reading(f"Action: search\nAction Input: {raw}") == ("action", "search", expected)


@pytest.mark.parametrize("text, expected", [
    ("Action: search\nAction Input: w<|im_end|>", ("action", "search", "w")),
    ("Action: search\nAction Input: w<|eot_id|>\n", ("action", "search", "w")),
    ("Action: search\nAction Input: w\n</s>", ("action", "search", "w")),
    ("AI: hello<|endoftext|>", ("finish", "hello")),
    ("Action: html\nAction Input: <s>old</s>", ("action", "html", "<s>old</s>")),
    ("AI: ChatML ends a turn with <|im_end|> and then", ("finish", "ChatML ends a turn with <|im_end|> and then")),
])
def test_trailing_end_of_turn_tokens_are_dropped(text, expected):
    assert reading(text) == expected


# --- JSON actions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, tool, tool_input", [
    ('{"Action": "search", "Action Input": "w"}', "search", "w"),
    ('{"ACTION": "search", "action-input": {"q": "w"}}', "search", {"q": "w"}),
    ('{"tool_call": {"action": "search", "action_input": {"q": "w"}}}', "search", {"q": "w"}),
    ('{"function": {"name": "search", "arguments": "{\\"q\\": \\"w\\"}"}}', "search", {"q": "w"}),
])
def test_json_action_key_variants_and_wrappers(text, tool, tool_input):
    assert reading(text) == ("action", tool, tool_input)


def test_json_final_action_in_a_wrapper():
    assert reading('{"tool_call": {"action": "Final Answer", "action_input": "Paris"}}') == ("finish", "Paris")


def test_action_final_answer_with_colon_keeps_later_lines():
    assert reading("Action: Final Answer: line1\nline2") == ("finish", "line1\nline2")
    assert reading("Action: search：weather\nin SF", ["search"]) == ("action", "search", "weather\nin SF")


def test_registered_name_with_a_colon_is_not_split():
    assert reading("Action: db:query\nAction Input: x", ["db:query"]) == ("action", "db:query", "x")
    assert reading("Action: db:query", ["db:query"])[0] == "error"


@pytest.mark.parametrize("text", [
    "- " * 100_000,
    "1. " * 100_000,
    "#" * 100_000 + " Action: x",
    " " * 100_000 + "Action",
    "Action: a" + " " * 100_000 + "b",
    "Action: a" + " action" * 50_000,
    "Action: a" + ",;|" * 50_000 + "Action Input: x",
    "\u200b" * 100_000 + "Action: x",
    "思考：" * 100_000,
    "行动：a\n行动输入：b\n" * 20_000,
    "<|im_end|>" * 100_000,
    "x </s>" * 100_000,
    "Final Answer\n" * 100_000,
    "- Action: a\n- Action Input: b\n" * 20_000,
])
def test_new_pathological_inputs_finish(text):
    # pytest's timeout is the termination bound (catastrophic backtracking never ends); parser_bench.py
    # has the speed figures
    result = reading(text)
    kind, *rest = result
    assert kind in ("action", "finish", "error") and rest, result
    if kind == "action":
        assert isinstance(rest[0], str) and rest[0].strip() and rest[0] in text
    else:
        assert isinstance(rest[-1], str) and rest[-1].strip()


@pytest.mark.parametrize("tool", ["[search]", "<search>", "[ search ]"])
def test_tool_name_copied_with_template_brackets(tool):
    assert reading(f"Thought: x\nAction: {tool}\nAction Input: w", ["search"]) == ("action", "search", "w")


def test_call_style_brackets_are_not_template_brackets():
    assert reading("Thought: x\nAction: search[weather]") == ("action", "search", "weather")


@pytest.mark.parametrize("text", [
    "*Thought:* x\n*Action:* search\n*Action Input:* w",
    "_Thought:_ x\n_Action:_ search\n_Action Input:_ w",
])
def test_italic_markers(text):
    assert reading(text) == ("action", "search", "w")


@pytest.mark.parametrize("raw", ["**kwargs", "*.py", "__init__.py"])
def test_markup_right_after_the_colon_is_input_not_bold(raw):
    assert reading(f"Action: python\nAction Input:{raw}") == ("action", "python", raw)


def test_final_answer_tool_name_with_a_trailing_colon():
    assert reading("Action: Final Answer:\nAction Input: Paris") == ("finish", "Paris")
    assert reading("Action: search:\nAction Input: w", ["search"]) == ("action", "search", "w")
