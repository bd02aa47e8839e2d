"""Plan parsing (robust JSON) and validation (every bad input the issue lists)."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.errors import ModelFeedbackError, RunError, UserError
from chatgpt_tool_hub.planner.plan import PlanError, PlanFeedback, parse_plan, validate_plan

from planner_helpers import plan, task

GOOD = [task(0, "text-to-image", {"text": "a cat"}), task(1, "image-captioning", {"image": "<resource>-0"}, [0])]


def problems_of(items, tools, max_tasks=20):
    tasks, problems = validate_plan(items, tools, max_tasks=max_tasks)
    assert (tasks == []) == bool(problems)
    return problems


# ---- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    json.dumps(GOOD),
    "```json\n" + json.dumps(GOOD, indent=2) + "\n```",
    "Sure! Here is the plan:\n" + json.dumps(GOOD) + "\nLet me know if you need anything else.",
    str(GOOD),  # Python repr: single quotes
    json.dumps(GOOD).replace("}}", "},}").replace("]}", "],}")[:-1] + ",]",  # trailing commas
    "[Note] two tasks follow\n" + json.dumps(GOOD),  # a bracket in the prose before the plan
    json.dumps(GOOD).replace("<resource>", "<GENERATED>"),  # HuggingGPT's tag
    "[\n  // first the picture\n" + json.dumps(GOOD)[1:-1] + "  // then its caption\n]",  # comments
    "```json\n[ /* the plan */ " + json.dumps(GOOD)[1:] + "\n```",
])
def test_parse_accepts_llm_shaped_json(text, tools):
    parsed = parse_plan(text)
    assert [item["task"] for item in parsed.items] == ["text-to-image", "image-captioning"]
    tasks, problems = validate_plan(parsed.items, tools, max_tasks=20)
    assert problems == [] and [t.id for t in tasks] == [0, 1]


def test_parse_single_quotes_with_apostrophes_and_python_literals():
    parsed = parse_plan("[{'task': 'upper', 'id': 0, 'dep': [-1], 'args': {'text': \"it's fine\"}, 'x': True}]")
    assert parsed.items[0]["args"]["text"] == "it's fine"


def test_parse_single_object_and_wrapped_list():
    assert parse_plan('{"task": "upper", "id": 0, "dep": [-1], "args": {"text": "a"}}').items[0]["id"] == 0
    assert len(parse_plan('{"tasks": [{"task": "upper", "id": 0, "args": {"text": "a"}}]}').items) == 1


def test_cut_off_json_is_a_clear_problem():
    text = json.dumps(GOOD)[:-25]
    with pytest.raises(PlanFeedback) as err:
        parse_plan(text, finish_reason="length")
    message = str(err.value)
    assert "cut off" in message and "token limit" in message
    assert isinstance(err.value, ModelFeedbackError)


def test_no_json_at_all_is_a_problem():
    with pytest.raises(PlanFeedback, match="no JSON list"):
        parse_plan("I would caption the image and then read it aloud.")


def test_empty_plan_with_answer():
    parsed = parse_plan("[]\nAnswer: Paris is the capital of France.")
    assert parsed.items == [] and parsed.answer == "Paris is the capital of France."
    assert parse_plan("[]").answer == ""
    assert parse_plan("```json\n[]\n```").items == []


# ---- validation: the bad inputs ---------------------------------------------------------------


def test_valid_plan(tools):
    tasks, problems = validate_plan(GOOD, tools, max_tasks=20)
    assert problems == []
    assert tasks[1].dep == (0,) and tasks[0].dep == ()
    assert tasks[1].as_dict() == GOOD[1]


def test_cycle(tools):
    items = [task(0, "upper", {"text": "<resource>-1"}, [1]), task(1, "upper", {"text": "<resource>-0"}, [0]),
             task(2, "upper", {"text": "fine"})]
    problems = problems_of(items, tools)
    assert any("cycle" in p and "0, 1" in p for p in problems)


def test_self_dependency(tools):
    problems = problems_of([task(0, "upper", {"text": "x"}, [0])], tools)
    assert any("depends on itself" in p for p in problems)


def test_dependency_on_a_missing_id(tools):
    problems = problems_of([task(0, "upper", {"text": "<resource>-7"}, [7])], tools)
    assert any("depends on task 7, which is not in the plan" in p for p in problems)
    assert any("there is no task 7" in p for p in problems)


def test_missing_or_bad_id(tools):
    problems = problems_of([{"task": "upper", "args": {"text": "x"}}, task(-3, "upper", {"text": "x"})], tools)
    assert len(problems) == 2 and all("id" in p for p in problems)


def test_duplicate_ids(tools):
    problems = problems_of([task(0, "upper", {"text": "x"}), task(0, "upper", {"text": "y"})], tools)
    assert any("used more than once" in p for p in problems)


def test_unknown_task(tools):
    problems = problems_of([task(0, "summarization", {"text": "x"})], tools)
    assert "unknown task 'summarization'" in problems[0] and "upper" in problems[0]


def test_ten_thousand_tasks_are_rejected_by_the_task_limit(tools):
    # how fast: benchmarks/planner.py ("Refusing a 10,000-task plan")
    items = [task(i, "upper", {"text": str(i)}, [i - 1] if i else [-1]) for i in range(10_000)]
    parsed = parse_plan(json.dumps(items))
    problems = problems_of(parsed.items, tools, max_tasks=20)
    assert problems == ["the plan has 10000 tasks; at most 20 are allowed. Plan as few tasks as the request needs"]


def test_a_reference_the_dep_list_forgot_becomes_a_dependency(tools):
    items = [task(0, "text-to-image", {"text": "a cat"}), task(1, "image-captioning", {"image": "<resource>-0"})]
    tasks, problems = validate_plan(items, tools, max_tasks=20)
    assert problems == [] and tasks[1].dep == (0,)  # as JARVIS's fix_dep does


def test_an_in_string_reference_becomes_a_dependency_too_and_a_cycle_it_makes_is_refused(tools):
    items = [task(0, "upper", {"text": "a"}), task(1, "upper", {"text": "see <resource>-0 here"})]
    tasks, problems = validate_plan(items, tools, max_tasks=20)
    assert problems == [] and tasks[1].dep == (0,)
    looped = [task(0, "upper", {"text": "<resource>-1"}), task(1, "upper", {"text": "<resource>-0"})]
    assert any("cycle" in p for p in problems_of(looped, tools))
    assert any("its own result" in p for p in problems_of([task(0, "upper", {"text": "<resource>-0"})], tools))


@pytest.mark.parametrize("spelling", ["<GENERATED-0>", "<GENERATED>_0", "<resource_0>", "< generated > - 0"])
def test_misspelt_references_are_read_as_references(spelling, tools):
    from chatgpt_tool_hub.planner.binding import placeholders, whole_placeholder

    assert placeholders(f"see {spelling} here") == [0] and whole_placeholder(spelling) == 0
    items = [task(0, "upper", {"text": "a"}), task(1, "upper", {"text": spelling}, [0])]
    assert problems_of(items, tools) == []


def test_argument_of_the_wrong_kind(tools):
    # an image argument for a text-only tool
    problems = problems_of([task(0, "upper", {"image": "cat.png"})], tools)
    assert any("'upper' takes text, not a 'image' argument" in p for p in problems)
    assert any("needs a text argument" in p for p in problems)
    # an image argument fed from a task that produces text
    items = [task(0, "upper", {"text": "a"}), task(1, "image-captioning", {"image": "<resource>-0"}, [0])]
    assert problems_of(items, tools) == ["task 1 (image-captioning): its image argument expects image, but task 0 "
                                         "(upper) produces text"]


def test_lenient_where_safe(tools):
    items = [{"task": "UPPER", "id": "0", "dep": -1, "args": {"query": "x"}}]  # case, string id, bare dep, any key
    tasks, problems = validate_plan(items, tools, max_tasks=20)
    assert problems == [] and tasks[0].task == "upper" and tasks[0].id == 0


def test_plan_error_family():
    assert issubclass(PlanError, RunError) and not issubclass(PlanError, UserError)
    assert issubclass(PlanFeedback, ModelFeedbackError)


def test_plan_helper_round_trip():
    assert json.loads(plan(task(0, "upper", {"text": "x"}))) == [GOOD[0] | {"task": "upper", "args": {"text": "x"}}]


BROKEN_SECOND_TASK = [
    # a bracket in place of a brace: the list never decodes
    '[{"task": "upper", "id": 0, "dep": [-1], "args": {"text": "a"}}, '
    '{"task": "upper", "id": 1, "dep": [0], "args": {"text": "<resource>-0"]}]',
    # a missing comma
    '[{"task": "upper", "id": 0, "dep": [-1], "args": {"text": "a"}}, '
    '{"task": "upper" "id": 1, "dep": [0], "args": {"text": "<resource>-0"}}]',
    # an entry that is not an object
    '[{"task": "upper", "id": 0, "dep": [-1], "args": {"text": "a"}}, 3]',
]


@pytest.mark.parametrize("text", BROKEN_SECOND_TASK)
def test_a_list_that_cannot_be_read_is_sent_back_not_cut_to_its_first_task(text):
    with pytest.raises(PlanFeedback, match="could not be read"):
        parse_plan(text)


def test_a_broken_draft_before_a_good_plan_is_passed_over(tools):
    text = "Draft: " + BROKEN_SECOND_TASK[1] + "\nFixed:\n" + json.dumps(GOOD)
    assert [item["id"] for item in parse_plan(text).items] == [0, 1]


def test_a_list_inside_a_broken_plan_is_not_taken_for_the_plan():
    text = ('[{"task": "upper", "id": 0, "args": {"text": "a", "boxes": [{"x": 1}]}}, '
            '{"task": "upper" "id": 1}]')
    with pytest.raises(PlanFeedback, match="could not be read"):
        parse_plan(text)


def test_ten_thousand_tasks_in_python_literal_form_are_not_cut_to_one(tools):
    items = [task(i, "upper", {"text": str(i)}, [i - 1] if i else [-1]) for i in range(10_000)]
    with pytest.raises(PlanFeedback) as err:  # how fast: benchmarks/planner.py
        parse_plan(str(items))  # single quotes, far beyond what is worth literal_eval-ing
    assert "could not be read" in str(err.value) and "characters" in str(err.value)
