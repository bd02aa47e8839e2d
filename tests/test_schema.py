"""The schema layer against real-world definitions: dialects normalised once, strict and safe validation,
raw function definitions, rich @tool schemas and the prompt that shows them."""

from __future__ import annotations

import dataclasses
import enum
from typing import Literal, Optional, TypedDict

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.engine.loop import Engine, EngineSettings
from chatgpt_tool_hub.engine.prompts import tool_block
from chatgpt_tool_hub.errors import ConfigError, ToolInputError
from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool, tool
from chatgpt_tool_hub.tools.base import ToolContext
from chatgpt_tool_hub.tools.schema import normalize

from helpers import act, answer

BFCL = {  # the Berkeley Function Calling Leaderboard's dialect
    "name": "calculate_area",
    "description": "Area of a shape.",
    "parameters": {
        "type": "dict",
        "properties": {
            "base": {"type": "float", "description": "the base"},
            "sides": {"type": "tuple", "items": {"type": "integer"}, "description": "side lengths"},
            "unit": {"type": "string", "enum": ["cm", "m"], "default": "cm"},
            "extra": {"type": "any", "description": "anything"},
        },
        "required": ["base"],
    },
}


def area(base: float, sides=None, unit="cm", extra=None) -> str:
    return f"{base} {unit} {sides} {extra}"


# ---- normalising ------------------------------------------------------------------------------------


def test_dialects_become_valid_2020_12_schemas():
    fixed = normalize({"type": "dict", "properties": {
        "a": {"type": "float"}, "b": {"type": "string", "nullable": True}, "c": {"type": ["integer", "null"]},
        "d": {"type": "tuple", "items": [{"type": "int"}, {"type": "str"}]}, "e": {"type": "any"},
        "f": {"type": "string", "required": True}, "g": "boolean", "h": {"type": "list", "items": {"type": "dict"}},
    }}, "t")
    props = fixed["properties"]
    assert fixed["type"] == "object" and fixed["required"] == ["f"]
    assert props["a"] == {"type": "number"} and props["b"]["type"] == ["string", "null"]
    assert props["c"]["type"] == ["integer", "null"] and "type" not in props["e"]
    assert props["d"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert props["f"] == {"type": "string"} and props["g"] == {"type": "boolean"}
    assert props["h"] == {"type": "array", "items": {"type": "object"}}


def test_a_pattern_that_is_not_a_regex_is_refused_when_the_tool_is_made():
    with pytest.raises(ConfigError, match=r"tool 'bad-pattern'.*parameters\.properties\.code"):
        normalize({"type": "object", "properties": {"code": {"type": "string", "pattern": "(["}}}, "bad-pattern")


def test_a_schema_that_cannot_be_fixed_names_the_tool_and_the_path():
    with pytest.raises(ConfigError, match=r"tool 'broken'.*parameters\.properties\.n.*"):
        normalize({"type": "object", "properties": {"n": {"type": "integer", "minimum": {"x": 1}}}}, "broken")
    with pytest.raises(ConfigError, match="must describe a JSON object"):
        normalize({"type": "string"}, "scalar")


def test_a_property_whose_type_is_a_list_no_longer_crashes_a_run():
    """OpenAPI 3.1 / MCP type arrays: the example input and the prompt used to raise TypeError."""
    @tool(name="lookup", description="Look a thing up.", parameters={
        "type": "object", "properties": {"id": {"type": ["string", "integer"]}, "note": {"type": ["string", "null"]}},
        "required": ["id"]})
    def lookup(id, note=None) -> str:
        return f"found {id}"

    llm = ScriptedLLM([act("lookup", '{"id": 7}'), answer("done")])
    app = AppFactory().create_app(tools_list=[lookup], llm=llm, no_default=True)
    assert app.ask("find 7") == "done"
    assert "id: string/integer, required; note: string or null" in llm.requests[0][0]["content"]


# ---- raw definitions --------------------------------------------------------------------------------


def test_a_bfcl_definition_registers_in_its_own_dialect_and_calls_its_function():
    made = Tool.from_function(BFCL, area)
    assert made.name == "calculate_area" and made.description == "Area of a shape."
    props = made.parameters["properties"]
    assert props["base"]["type"] == "number" and props["sides"]["type"] == "array"
    assert made.run({"base": "2.5", "sides": [1, 2], "unit": "m"}).startswith("2.5 m [1, 2] None")
    with pytest.raises(ToolInputError, match="'unit': 'km' is not one of"):
        made.run({"base": 1, "unit": "km"})


def test_openai_style_definitions_and_pairs_in_tools_list():
    definition = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                                   "parameters": {"type": "object", "properties": {
                                                       "city": {"type": "string"}}, "required": ["city"]}}}
    llm = ScriptedLLM([act("get_weather", '{"city": "北京"}'), answer("sunny")])
    app = AppFactory().create_app(tools_list=[(definition, lambda city: f"{city}: sunny")], llm=llm, no_default=True)
    result = app.run("weather in Beijing?")
    assert app.tool_names == ["get_weather"] and result.steps[0].observation == "北京: sunny"


def test_a_type_name_that_is_no_json_type_is_widened_with_a_warning_that_names_it(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="chatgpt_tool_hub.tools"):
        fixed = normalize({"type": "object", "properties": {"n": {"type": "frobnicate"}, "m": {"type": "any"}}},
                          "odd")
    assert fixed["properties"] == {"n": {}, "m": {}}
    said = [r.getMessage() for r in caplog.records]
    assert said == ["tool 'odd': 'frobnicate' is not a JSON type (parameters.properties.n.type): any value is "
                    "taken there"]  # "any" is a known spelling: no warning


# ---- validation -------------------------------------------------------------------------------------


@tool(name="pick")
def pick(number: int, label: str = "x", flag: bool = False) -> str:
    """Pick a number."""
    return f"{number} {label} {flag}"


def test_unknown_arguments_are_refused_with_the_accepted_names():
    with pytest.raises(ToolInputError, match=r"unknown argument 'num_of_items'\. Accepted: number \(required\)"):
        pick.run({"num_of_items": 5})


def test_a_lone_key_is_not_mapped_onto_a_single_parameter():
    @tool(name="count")
    def count(number: int) -> int:
        return number

    with pytest.raises(ToolInputError, match="unknown argument 'num_of_items'"):
        count.run({"num_of_items": 5})
    assert count.run("5") == "5\n[input adjusted: number: \"5\" -> 5]"  # plain text is still its one value


@pytest.mark.parametrize("given, shown, note", [
    ({"number": "5"}, "5 x False", 'number: "5" -> 5'),
    ({"number": 4.0}, "4 x False", "number: 4.0 -> 4"),
    ({"number": 1, "flag": "true"}, "1 x True", 'flag: "true" -> true'),
    ({"number": 1, "label": None}, "1 x False", "label: null -> omitted"),
])
def test_safe_coercions_are_applied_and_shown(given, shown, note):
    out = pick.run(given)
    assert out == f"{shown}\n[input adjusted: {note}]"


@pytest.mark.parametrize("given", [{"number": "five"}, {"number": 2.5}, {"number": None}, {"number": "1e400"}])
def test_unsafe_values_are_not_coerced(given):
    with pytest.raises(ToolInputError):
        pick.run(given)


def test_plain_text_for_a_lone_number_is_coerced_like_a_json_value():
    @tool(name="count")
    def count(number: int) -> str:
        return f"n={number!r}"

    assert count.run("5.0") == 'n=5\n[input adjusted: number: "5.0" -> 5]'
    assert count.run('"5"') == 'n=5\n[input adjusted: number: "5" -> 5]'  # a JSON string literal
    for refused in ("5.5", '"x"', "1e400"):
        with pytest.raises(ToolInputError):
            count.run(refused)

    @tool(name="echo")
    def echo(text: str) -> str:
        return text

    assert echo.run('"quoted"') == '"quoted"'  # text stays as written


def test_null_is_omitted_only_where_the_schema_does_not_take_null():
    @tool(name="measure", parameters={"type": "object", "required": ["a"], "properties": {
        "a": {"type": "integer"},
        "unit": {"type": "string", "enum": ["cm", "m"], "default": "cm"},
        "mode": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": "fast"},
        "kind": {"enum": ["x", None]},
        "free": {}}})
    def measure(a, unit="cm", mode="fast", kind="x", free="unset"):
        return f"{unit} {mode} {kind} {free}"

    assert measure.run({"a": 1, "unit": None}) == "cm fast x unset\n[input adjusted: unit: null -> omitted]"
    assert measure.run({"a": 1, "mode": None, "kind": None, "free": None}) == "cm None None None"


def test_truncated_native_arguments_are_an_error_not_a_string_value():
    @tool(name="say")
    def say(text: str) -> str:
        return text

    replies = [LLMResponse("", tool_calls=[ToolCall("c1", "say", '{"text": "hello wor')]), "ok"]
    result = Engine(ScriptedLLM(replies), [say], EngineSettings(tool_calling="native")).run("say it")
    step = result.steps[0]
    assert step.status == "error" and "not valid JSON" in step.observation and "hello" not in step.observation[:40]


def test_a_parameter_named_context_is_an_ordinary_argument():
    seen = {}

    @tool(name="answer-from")
    def answer_from(question: str, context: str) -> str:
        return f"{question} | {context}"

    @tool(name="session")
    def session(text: str, run: ToolContext) -> str:
        seen["session"] = run.session_id
        return text

    assert "context" in answer_from.parameters["properties"] and not answer_from.needs_context
    assert answer_from.run({"question": "who?", "context": "Ada wrote it"}) == "who? | Ada wrote it"
    assert "run" not in session.parameters["properties"] and session.needs_context
    assert session.run("hi", ToolContext(session_id="s1")) == "hi" and seen["session"] == "s1"


def test_each_schema_builds_its_validator_once(monkeypatch):
    import jsonschema

    @tool(name="adder")
    def adder(a: int, b: int) -> int:
        return a + b

    made = []
    real = jsonschema.Draft202012Validator

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(jsonschema, "Draft202012Validator", counting)
    for i in range(20):
        assert adder.run({"a": i, "b": 1}) == str(i + 1)  # flat schemas: valid calls need no validator at all
        with pytest.raises(ToolInputError, match="'b': 'x' is not of type 'integer'"):
            adder.run({"a": i, "b": "x"})                 # the messages come from the one jsonschema validator
    assert len(made) == 1


# ---- @tool keeps the schema ------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Person:
    name: str
    age: int = 0


class Address(TypedDict):
    city: str
    zip: str


def test_decorated_functions_keep_enums_items_nested_models_and_defaults():
    @tool(name="register")
    def register(person: Person, colour: Colour, mode: Literal["fast", "slow"] = "fast",
                 tags: list[str] = (), scores: dict[str, float] | None = None, address: Optional[Address] = None,
                 limit: int = 10) -> str:
        """Register someone.

        Args:
            person: who
            colour: their colour
        """
        return f"{type(person).__name__}:{person.name}:{person.age} {colour.value} {mode} {list(tags)} {limit}"

    props = register.parameters["properties"]
    assert props["colour"] == {"enum": ["red", "blue"], "description": "their colour"}
    assert props["mode"] == {"enum": ["fast", "slow"], "default": "fast"}
    assert props["tags"]["items"] == {"type": "string"} and props["limit"]["default"] == 10
    assert [p.get("type") for p in props["scores"]["anyOf"]] == ["object", "null"]
    address = next(p for p in props["address"]["anyOf"] if p.get("type") == "object")
    assert address["properties"] == {"city": {"type": "string"}, "zip": {"type": "string"}}
    person = props["person"]
    resolved = register.parameters["$defs"]["Person"] if "$ref" in person else person
    assert resolved["properties"]["name"]["type"] == "string" and "name" in resolved["required"]
    out = register.run({"person": {"name": "Ada", "age": 36}, "colour": "blue", "tags": ["x"]})
    assert out == "Person:Ada:36 blue fast ['x'] 10"  # the dataclass and the Enum arrive as objects
    with pytest.raises(ToolInputError, match="'colour'"):
        register.run({"person": {"name": "Ada"}, "colour": "green"})
    with pytest.raises(ToolInputError, match="'agee' was unexpected"):  # a misspelt field is not dropped
        register.run({"person": {"name": "Ada", "agee": 36}, "colour": "blue"})
    with pytest.raises(ToolInputError, match="'address': .*'town'"):  # nor in a TypedDict
        register.run({"person": {"name": "Ada"}, "colour": "blue", "address": {"city": "x", "zip": "1", "town": 2}})


# ---- the prompt ---------------------------------------------------------------------------------------


def test_the_prompt_shows_types_required_enums_defaults_descriptions_and_nesting():
    @tool(name="book", description="Book a trip.", parameters={
        "type": "object", "required": ["who"], "properties": {
            "who": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    "required": ["name"]},
            "mode": {"type": "string", "enum": ["train", "plane"], "default": "train", "description": "how"},
            "stops": {"type": "array", "items": {"type": "string"}}}})
    def book(who, mode="train", stops=()):
        return "booked"

    line = tool_block([book], 3000)
    assert line.startswith("> book: Book a trip. Input: a JSON object like ")
    assert 'who: object {name: string, required; age: integer}, required' in line
    assert 'mode: "train"|"plane" = "train" - how' in line and "stops: array of string" in line


def test_a_long_tool_list_is_shortened_to_its_token_budget_without_dropping_tools():
    tools = []
    for i in range(40):
        @tool(name=f"t{i}", description="word " * 120, parameters={
            "type": "object", "properties": {f"p{j}": {"type": "string", "description": "d " * 30} for j in range(6)}})
        def fn(**kwargs):
            return "x"
        tools.append(fn)
    from chatgpt_tool_hub.llm.tokens import count_tokens

    full = tool_block(tools, 0)
    short = tool_block(tools, 3000)
    assert count_tokens(full) > 3000 >= count_tokens(short)
    assert all(f"> t{i}:" in short for i in range(40))


def test_every_tool_line_is_bounded_whatever_its_schema_and_the_example_keeps_the_required_names():
    from chatgpt_tool_hub.engine.prompts import tool_line
    from chatgpt_tool_hub.llm.tokens import count_tokens

    wide = {"type": "object", "properties": {f"sub{k}": {"type": "string"} for k in range(20)}}
    big = tool(name="big", description="d", parameters={
        "type": "object", "required": ["param_7"],
        "properties": {f"param_{j}": wide for j in range(200)}})(lambda **kwargs: "ok")
    line = tool_line(big)
    assert len(line) < 1200 and '{"param_7": {}} (+199 more parameters)' in line
    block = tool_block([big] * 30, 3000)
    assert count_tokens(block) <= 3000 and block.count("> big:") == 30
    small = tool(name="small", description="d", parameters={
        "type": "object", "properties": {"a": wide}})(lambda **kwargs: "ok")
    assert small.example_input(400).startswith('{"a": {"sub0": "..."')  # fits: shown whole
    assert small.example_input(40) == '{"a": {}}'  # flattened first


# ---- the quick metaschema check agrees with jsonschema's ------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import settings as hsettings
from hypothesis import strategies as st  # noqa: E402

_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.text(max_size=3),
                    st.lists(st.sampled_from(["string", "integer", "null", "x"]), max_size=3))
_KEYS = st.sampled_from(["type", "description", "required", "enum", "minLength", "minimum", "multipleOf", "format",
                         "readOnly", "default", "examples", "pattern", "x-extra", "maxItems", "nullable", "$ref"])
_NODES = st.recursive(
    st.dictionaries(_KEYS, _VALUES, max_size=4),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(st.text(max_size=3), inner,
                                                                                          max_size=3)}),
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, max_size=3)}),
    ), max_leaves=6)


@hsettings(max_examples=300, deadline=None)
@given(_NODES)
def test_the_quick_check_only_passes_what_the_metaschema_accepts(node):
    import jsonschema

    from chatgpt_tool_hub.tools.schema import _plainly_valid

    if _plainly_valid(node):
        jsonschema.Draft202012Validator.check_schema(node)  # must not raise
