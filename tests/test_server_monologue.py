"""The server's inner monologue (``reasoning_content``) is well-formed Markdown: chat UIs render it.

Every check renders the joined reasoning deltas with a CommonMark parser
(markdown-it-py) and looks at the tokens: each observation and action input is
one code fence whose content is the text as it was, the next thought is a
paragraph again, the planner's tasks and model choices are list items, and
nothing a tool returned becomes HTML.
"""

from __future__ import annotations

import json

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from chatgpt_tool_hub.events import ActionEvent, AnswerEvent, ErrorEvent, ObservationEvent, ThoughtEvent, TokenEvent
from chatgpt_tool_hub.planner.events import PlanEvent, SelectionEvent, TaskEndEvent, TaskStartEvent
from chatgpt_tool_hub.server.monologue import Monologue, fence

YES = "Thought: Do I need to use a tool? Yes"
NO = "Thought: Do I need to use a tool? No"

DATA = [
    "```python\nprint(1)\n```",                         # code the model fenced itself
    'print("```")\nprint("````")',                       # code holding fences
    "a ```` b\n````\n",                                  # a line that would close a shorter fence
    "<img src=x onerror=alert(1)>",                      # HTML
    "C:\\temp\\",                                        # a trailing backslash
    "the last line has no newline",
    "中文结果：你好\n第二行 **不是粗体**",
    "Traceback (most recent call last):\n  File \"x.py\", line 1\n    ```\nValueError: `bad`\n",
    "    four spaces\n\tand a tab\n\n  \n\nblank lines above, one of spaces",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "# not a heading\n- not a list\n> not a quote\n[x](http://127.0.0.1/) ![y](http://127.0.0.1/y.png)",
    "",
]


def tokens_of(text: str) -> list[Token]:
    return MarkdownIt("commonmark").parse(text)


def feed(mono: Monologue, events) -> tuple[str, str]:
    reasoning, content = [], []
    for event in events:
        for where, text in mono.feed(event):
            (reasoning if where == "reasoning" else content).append(text)
    return "".join(reasoning), "".join(content)


def streamed(text: str, size: int = 3) -> list[TokenEvent]:
    return [TokenEvent(text[i:i + size]) for i in range(0, len(text), size)]


def as_fenced(text: str) -> str:
    """What a fence token's content is for ``text``: the text, its last line ended."""
    return text if not text or text.endswith("\n") else text + "\n"


def fences(tokens: list[Token]) -> list[Token]:
    return [t for t in tokens if t.type == "fence"]


def paragraphs(tokens: list[Token]) -> list[str]:
    """The text of every paragraph outside any container."""
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "paragraph_open" and t.level == 0]


def html(tokens: list[Token]) -> list[Token]:
    found = [t for t in tokens if t.type == "html_block"]
    return found + [c for t in tokens if t.type == "inline" for c in (t.children or []) if c.type == "html_inline"]


def assert_well_formed(text: str, tokens: list[Token], after_line: int = 0) -> None:
    """Every top-level block (from ``after_line`` on: before it the model wrote the Markdown) starts after a
    blank line; every fence is closed on a line of its own."""
    lines = text.split("\n")
    for t in tokens:
        if t.level == 0 and t.map and t.nesting >= 0 and t.map[0] > after_line:
            assert lines[t.map[0] - 1].strip() == "", f"no blank line before {t.type} at line {t.map[0]}:\n{text}"
        if t.type == "fence":
            closing = lines[t.map[1] - 1].lstrip("> ").strip()
            assert closing == t.markup, f"a fence not closed on its own line:\n{text}"


def react_run(data: str, *, tokens: bool) -> list:
    first = f"{YES}\nAction: python\nAction Input: {data}"
    return [*(streamed(first) if tokens else []), ThoughtEvent("Do I need to use a tool? Yes"),
            ActionEvent("python", data), ObservationEvent("python", data),
            *(streamed(f"{NO}\nAI: done") if tokens else []), ThoughtEvent("Do I need to use a tool? No"),
            AnswerEvent("done")]


# ---- the fence ----------------------------------------------------------------------------------


@pytest.mark.parametrize("data", DATA)
def test_a_fence_holds_any_text_exactly(data):
    tokens = tokens_of(fence(data, "python") + "\nafter\n")
    (block,) = fences(tokens)
    assert block.content == as_fenced(data) and block.info == "python"
    assert paragraphs(tokens) == ["after"]


def test_a_fence_is_longer_than_any_backtick_run_and_at_least_three():
    assert fence("x") == "```\nx\n```\n"
    assert fence("a `` b") == "```\na `` b\n```\n"
    assert fence("a ````` b\n") == "``````\na ````` b\n``````\n"


# ---- the text protocol --------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("data", DATA)
def test_action_inputs_and_observations_are_one_fence_each_and_the_next_thought_a_paragraph(data, tokens):
    mono = Monologue("react")
    reasoning, content = feed(mono, react_run(data, tokens=tokens))
    parsed = tokens_of(reasoning)
    action, observation = fences(parsed)
    assert action.content == as_fenced(data) and action.info == "python"
    assert observation.content == as_fenced(data) and observation.info == ""
    assert paragraphs(parsed)[-1] == NO and paragraphs(parsed)[0] == YES
    assert "Action: python" in paragraphs(parsed) and "Observation:" in paragraphs(parsed)
    assert html(parsed) == []
    assert_well_formed(reasoning, parsed)
    assert content == "done" and mono.reasoning_text == reasoning.strip()


def test_a_thought_streams_line_by_line_before_the_reply_ends():
    mono = Monologue("react")
    out = [d for e in streamed("Thought: the first line\nThought: the sec") for d in mono.feed(e)]
    assert "".join(t for _, t in out) == "Thought: the first line\n"


def test_a_fence_a_thought_leaves_open_is_closed_before_the_action():
    reply = f"{YES}, this code:\n```python\nx = 1\nAction: python\nAction Input: x = 1"
    events = [*streamed(reply), ThoughtEvent("this code"), ActionEvent("python", "x = 1"),
              ObservationEvent("python", "<b>1</b>"), *streamed(f"{NO}\nAI: 1"), AnswerEvent("1")]
    reasoning, _ = feed(Monologue("react"), events)
    parsed = tokens_of(reasoning)
    assert [(f.info, f.content) for f in fences(parsed)] == [("python", "x = 1\n"), ("python", "x = 1\n"),
                                                             ("", "<b>1</b>\n")]
    assert paragraphs(parsed)[-1] == NO and html(parsed) == []
    assert_well_formed(reasoning, parsed, after_line=reasoning.split("\n").index("Action: python") - 1)


@pytest.mark.parametrize("thought", ["- a list item with code:\n  ```py\n  x = 1\n  ```\n", "~~~\nx\n~~~~\n",
                                     "- ```py\n  x = 1\n  ```\n"])
def test_a_thought_whose_fences_are_closed_gets_no_closing_line(thought):
    events = [*streamed(f"{YES}\n{thought}Action: python\nAction Input: 1"), ActionEvent("python", "1"),
              ObservationEvent("python", "1"), *streamed(f"{NO}\nAI: 1"), AnswerEvent("1")]
    reasoning, _ = feed(Monologue("react"), events)
    parsed = tokens_of(reasoning)
    assert [f.content for f in fences(parsed)][-2:] == ["1\n", "1\n"] and paragraphs(parsed)[-1] == NO
    assert reasoning.startswith(f"{YES}\n{thought}\nAction: python\n")


def test_a_reply_whose_action_was_not_run_is_shown_as_data():
    events = [*streamed("Action: python\nAction Input: ```\n<script>x</script>\nAI: not an answer"),
              ErrorEvent("Write `Action Input:` then the input.\n<br>", "OutputParserError"),
              *streamed(f"{NO}\nAI: done"), AnswerEvent("done")]
    reasoning, content = feed(Monologue("react"), events)
    parsed = tokens_of(reasoning)
    assert [f.content for f in fences(parsed)] == [
        "Action: python\nAction Input: ```\n<script>x</script>\nAI: not an answer\n",
        "Write `Action Input:` then the input.\n<br>\n"]
    assert paragraphs(parsed) == ["The reply could not be read:", NO] and html(parsed) == []
    assert content == "done"


@pytest.mark.parametrize("data", DATA)
def test_steps_of_nested_engines_are_block_quotes_holding_their_fences(data):
    events = [ActionEvent("research", "find x"), ActionEvent("search", data, depth=1),
              ObservationEvent("search", data, depth=1), ObservationEvent("research", "x"),
              ThoughtEvent("Do I need to use a tool? No"), AnswerEvent("x")]
    reasoning, _ = feed(Monologue("react"), events)
    parsed = tokens_of(reasoning)
    quoted = [f.content for f in fences(parsed) if f.level == 1]
    assert quoted == [as_fenced(data), as_fenced(data)]
    assert paragraphs(parsed)[-1] == NO and html(parsed) == []
    assert_well_formed(reasoning, parsed)


# ---- native tool calls ----------------------------------------------------------------------------


@pytest.mark.parametrize("data", DATA)
def test_native_inputs_are_json_fences_and_observations_fences(data):
    events = [*streamed("I will run it."), ThoughtEvent("I will run it."), ActionEvent("python", {"code": data}),
              ObservationEvent("python", data), *streamed("It ran."), AnswerEvent("It ran.")]
    reasoning, content = feed(Monologue("native"), events)
    parsed = tokens_of(reasoning)
    action, observation = fences(parsed)
    assert action.info == "json" and json.loads(action.content) == {"code": data}
    assert observation.content == as_fenced(data)
    assert paragraphs(parsed)[0] == "I will run it." and reasoning.count("I will run it.") == 1
    assert html(parsed) == [] and content == "It ran."
    assert_well_formed(reasoning, parsed)


# ---- the planner -------------------------------------------------------------------------------------


def planner_run(data: str) -> list:
    tasks = ({"task": "python", "id": 0, "dep": [-1], "args": {"text": data}},
             {"task": "image-captioning", "id": 1, "dep": [0], "args": {"image": "<GENERATED>-0"}})
    return [PlanEvent("Plan (2 tasks):\n0. python\n1. image-captioning", tasks=tasks),
            SelectionEvent("task 0", task_id=0, model="local/python", reason="it runs <b>code</b> ```"),
            SelectionEvent("task 1", task_id=1, model="nlpconnect/vit-gpt2", reason="captions"),
            TaskStartEvent("python", {"text": data}, task_id=0, model="local/python"),
            TaskEndEvent("python", data, task_id=0, status="ok"),
            TaskStartEvent("image-captioning", {"image": "a.png"}, task_id=1),
            TaskEndEvent("image-captioning", data, task_id=1, status="failed"),
            *streamed("It ran."), AnswerEvent("It ran.")]


@pytest.mark.parametrize("data", DATA)
def test_planner_tasks_and_models_are_list_items_and_results_fences(data):
    reasoning, content = feed(Monologue("planner"), planner_run(data))
    parsed = tokens_of(reasoning)
    lists = [t for t in parsed if t.type == "bullet_list_open"]
    items = [parsed[i + 2].content for i, t in enumerate(parsed) if t.type == "list_item_open"]
    assert len(lists) == 2 and len(items) == 4
    assert items[0].startswith("task 0: `python`") and items[1].endswith("after task 0")
    assert items[2].startswith("task 0: model `local/python`") and items[3].startswith("task 1: model")
    spans = [c.content for t in parsed if t.type == "inline" for c in (t.children or []) if c.type == "code_inline"]
    assert json.dumps({"text": data}, ensure_ascii=False) in spans
    inputs = [f for f in fences(parsed) if f.info == "json"]
    assert [json.loads(f.content) for f in inputs] == [{"text": data}, {"image": "a.png"}]
    results = [f.content for f in fences(parsed) if f.info == ""]
    assert results == [as_fenced(data), as_fenced(data)]
    assert "Observation (task 1, failed):" in paragraphs(parsed)
    assert html(parsed) == [] and content == "It ran."
    assert_well_formed(reasoning, parsed)
