"""The parser on replies real small models gave behind a local chat server (SmolLM2-135M, Gemma 3 270M).

Each case states its intended reading under the text protocol's rules: a marker counts only at a line
start (after optional whitespace and markdown), a JSON action counts when its keys say it is one and no
line-anchored marker came first, and a final-answer call's string is the answer.
"""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.engine.parser import Finish, parse_output
from tests.test_parser_variants import reading  # one reading of a reply for both files

# --- a marker that is not at a line start is prose ----------------------------------------


ATLANTIS = 'The weather in Atlantis is sunny and 25 degrees. "Thought: Do I need to use a tool? No"'


@pytest.mark.parametrize("names", [None, ["weather"]])
def test_quoted_marker_mid_sentence_is_an_implicit_answer(names):
    """SmolLM2-135M at temperature 0, three times in a row."""
    assert parse_output(ATLANTIS, names) == Finish(ATLANTIS, "", ATLANTIS)


@pytest.mark.parametrize("text", [
    'It is sunny.\n"Thought: Do I need to use a tool? No"\nThat is all.',  # quoted, on a line of its own
    "It is sunny.\n“Thought: Do I need to use a tool? No”\nThat is all.",
    "It is sunny. Do I need to use a tool? No. Paris is nice.",  # the question alone, mid-sentence
    "You could write Action: search and then Action Input: weather to look it up.",
    "The bot said AI: hello and left.",
    "天气很好。AI：今天是晴天。",
    "天气很好。行动：搜索\n然后结束。",
    "He wrote 'Final Answer: 42' on the board.",
    "Do not quote it. 'Observation: none'",
])
def test_markers_not_at_a_line_start_leave_the_whole_text_as_the_answer(text):
    assert reading(text) == ("finish", text)


@pytest.mark.parametrize("text, expected", [
    ("Thought: Do I need to use a tool? No\nAI: Sunny.", ("finish", "Sunny.")),
    ("Thought: Do I need to use a tool? No\nSunny.", ("finish", "Sunny.")),
    ("**Thought:** Do I need to use a tool? No\nSunny.", ("finish", "Sunny.")),
    ("Do I need to use a tool? No\nSunny.", ("finish", "Sunny.")),
    ("Thought: Hmm. Do I need to use a tool? No\nSunny.", ("finish", "Sunny.")),
    ("- Do I need to use a tool? No\nSunny.", ("finish", "Sunny.")),
    ("Thought: Do I need to use a tool? Yes\nAction: search\nAction Input: x", ("action", "search", "x")),
    ("  ## Action: search\n  ## Action Input: x", ("action", "search", "x")),
])
def test_line_anchored_protocol_still_parses(text, expected):
    assert reading(text) == expected


@pytest.mark.parametrize("text", [
    "Thought: Do I need to use a tool? No",
    "Do I need to use a tool? No",
    "**Do I need to use a tool? Yes**",
])
def test_a_line_anchored_tool_question_without_its_answer_is_still_an_error(text):
    assert reading(text)[0] == "error"


# --- a JSON action inside prose ---------------------------------------------------------------


HUB_05 = ('Sure, I will look that up.\n{"thoughts": {"text": "I should search", "reasoning": "it is live data"}, '
          '"tool": {"name": "search", "input": "weather in Paris"}}\nLet me know.')


@pytest.mark.parametrize("names", [None, ["search"]])
@pytest.mark.parametrize("text, expected", [
    (HUB_05, ("action", "search", "weather in Paris")),
    (HUB_05.replace("\n", " "), ("action", "search", "weather in Paris")),
    ('Sure. {"action": "search", "action_input": "weather"} One moment.', ("action", "search", "weather")),
    ('Sure, here it is:\n```json\n{"action": "search", "action_input": "weather"}\n```',
     ("action", "search", "weather")),
    ('Sure ```json {"action": "search", "action_input": "weather"}```', ("action", "search", "weather")),
    ('Thought: Let me check.\nSure: {"action": "search", "action_input": "weather"}', ("action", "search", "weather")),
    ('Done. {"action": "Final Answer", "action_input": "It is 21 degrees."}', ("finish", "It is 21 degrees.")),
    ('OK. {"thoughts": {"text": "done"}, "tool": {"name": "answer-user", "input": "Paris."}}', ("finish", "Paris.")),
])
def test_a_json_action_inside_prose_is_read(text, expected, names):
    assert reading(text, names) == expected


@pytest.mark.parametrize("names", [None, ["search"]])
def test_a_json_action_before_a_later_marker_wins(names):
    text = 'I will look that up. {"action": "search", "action_input": "x"}\nAI: I looked it up.'
    assert reading(text, names) == ("action", "search", "x")


@pytest.mark.parametrize("names", [None, ["search"]])
@pytest.mark.parametrize("text, expected", [
    ('AI: send {"action": "search", "action_input": "x"} to call it.',
     ("finish", 'send {"action": "search", "action_input": "x"} to call it.')),
    ('Thought: x\nAction: search\nAction Input: y\nAs in {"action": "other", "action_input": "z"}',
     ("action", "search", 'y\nAs in {"action": "other", "action_input": "z"}')),
])
def test_a_line_anchored_marker_before_the_json_wins(text, expected, names):
    assert reading(text, names) == expected


@pytest.mark.parametrize("text", [
    'Sure: {"a": 1} is a dict.',
    'The reply was {"action": "search"} without its input.',
    'Use {"name": "search", "arguments": {"q": "x"}} in your request.',
    'It prints {"action": "search", "action_input": "x" and stops.',
])
def test_prose_with_json_that_is_no_complete_action_stays_the_answer(text):
    assert reading(text) == ("finish", text)


# --- a final-answer call whose string ends in a line break ------------------------------------


@pytest.mark.parametrize("text", [
    'Action: finish(answer="The answer is 36.\\n")',  # an escaped line break
    'Action: finish(answer="The answer is 36.\n")',  # a real one inside the quotes
    'Action: final_answer("The answer is 36.\n")',
    "Action: final_answer('The answer is 36.\r\n')",
    'finish(answer="The answer is 36.\n")',
    'finish(answer="The answer is 36.\\n")',
    'final_answer("The answer is 36.\n")',
    'Thought: I know it now.\nfinish(answer="The answer is 36.\n")',
    'Thought: Do I need to use a tool? No\nfinal_answer(answer="The answer is 36.\n")',
    'Thought: done\n```py\nfinal_answer("The answer is 36.\n")\n```',
])
def test_a_final_call_with_a_trailing_line_break_gives_the_answer(text):
    assert reading(text, ["search"]) == ("finish", "The answer is 36.")


def test_a_line_break_inside_a_call_string_keeps_the_lines_between():
    assert reading('Action: finish(answer="line 1\nline 2\n")') == ("finish", "line 1\nline 2")
    assert reading('Action: search(query="a\nb", k=3)', ["search"]) == ("action", "search", {"query": "a\nb", "k": 3})


@pytest.mark.parametrize("text", [
    "Here is the code:\n```python\ndef finish(x):\n    return x\nfinish(3)\n```",
    "Call finish(answer=\"x\") when done.",
    "finish(answer=\"x\") is how you end.",
])
def test_code_or_prose_that_mentions_a_final_call_stays_the_answer(text):
    assert reading(text) == ("finish", text)


def test_a_registered_finish_tool_called_bare_is_not_the_final_answer():
    assert reading('finish(answer="x")', ["finish"]) == ("finish", 'finish(answer="x")')


@pytest.mark.parametrize("text", [
    'Action: final_answer(answer="Paris")',
    'Action: answer_user(output="Paris")',
    '{"action": "Final Answer", "action_input": {"answer": "Paris"}}',
])
def test_the_one_answer_argument_of_a_final_call_is_the_answer(text):
    assert reading(text) == ("finish", "Paris")
