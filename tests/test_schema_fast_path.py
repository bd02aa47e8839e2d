"""The compiled argument checker against the full route (coercions, jsonschema, the message for the model).

For the schemas of every registered tool, for hand-written edge cases and for
generated schemas and inputs, a tool call's arguments come out the same --
the same values of the same types, the same notes, or the same error text --
whether the compiled checker is on or off; and valid arguments take the
compiled route without asking jsonschema.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
from collections import OrderedDict
from typing import Any, Literal, Optional

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatgpt_tool_hub.errors import ConfigError, ToolInputError
from chatgpt_tool_hub.tools import Tool, main_tool_register, tool
from chatgpt_tool_hub.tools.checker import compile_checker
from chatgpt_tool_hub.tools.schema import ParameterSchema

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- how an outcome is compared -------------------------------------------------------------------------


def typed(value: Any) -> Any:
    """``value`` with every type spelt out: 1, 1.0 and True differ, and so do a list and a tuple."""
    if isinstance(value, dict):
        return (type(value).__name__, [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    if value is not None and not isinstance(value, (str, int, float)):
        return (type(value).__name__,)  # an object() is copied for each side: its type is what counts
    return (type(value).__name__, value)


def outcome(call: Any) -> tuple:
    try:
        result = call()
    except ToolInputError as exc:
        return ("error", str(exc))
    if isinstance(result, tuple):  # prepare's (arguments, notes)
        return ("ok", typed(result[0]), list(result[1]))
    return ("ok", typed(dict(result)), list(getattr(result, "notes", [])))


def full_route(built: Tool) -> Tool:
    """A copy of ``built`` whose schema never takes the compiled route."""
    twin = copy.copy(built)
    schema = built.parameter_schema
    assert schema is not None
    reference = ParameterSchema(schema.schema, schema.tool, allow_extra=schema.allow_extra, compiled=False)
    reference.source = twin.parameters
    twin.__dict__["_parameter_schema"] = reference
    return twin


def assert_same(built: Tool, arguments: Any) -> tuple:
    fast = outcome(lambda: built.parse_arguments(copy.deepcopy(arguments)))
    full = outcome(lambda: full_route(built).parse_arguments(copy.deepcopy(arguments)))
    assert fast == full, arguments
    return fast


# ---- values for a schema -----------------------------------------------------------------------------------

JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(), st.floats(allow_nan=True),
    st.sampled_from([0.0, 1.0, 3.0, -2.5, 2**60, "5", " 7 ", "5.0", "2.5", "1e3", "true", "FALSE", "nan", "inf",
                     "", "a", "[1, 2]", '{"a": 1}', "[", [], {}, [1, "a"], {"x": 1}, (1, 2)]),
    st.text(max_size=6),
)


def values(node: Any, depth: int = 0) -> st.SearchStrategy:
    """Mostly fitting values for ``node``, and junk."""
    if not isinstance(node, dict) or depth > 4:
        return JUNK
    options: list[st.SearchStrategy] = [JUNK]
    if node.get("enum"):
        options.append(st.sampled_from(node["enum"]))
    if "const" in node:
        options.append(st.just(node["const"]))
    kinds = node.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds else []:
        if kind == "string":
            options.append(st.text(max_size=8))
        elif kind == "integer":
            options.append(st.integers(-20, 20))
        elif kind == "number":
            options.append(st.one_of(st.integers(-20, 20), st.floats(-20, 20)))
        elif kind == "boolean":
            options.append(st.booleans())
        elif kind == "null":
            options.append(st.none())
        elif kind == "array":
            options.append(st.lists(values(node.get("items", {}), depth + 1), max_size=3))
        elif kind == "object":
            options.append(objects(node, depth + 1))
    for key in ("anyOf", "oneOf", "allOf"):
        options += [values(branch, depth + 1) for branch in node.get(key) or []]
    return st.one_of(options)


def objects(node: dict, depth: int = 0) -> st.SearchStrategy:
    props = node.get("properties") or {}
    required = set(node.get("required") or [])
    fixed = {k: values(v, depth) for k, v in props.items() if k in required}
    optional = {k: values(v, depth) for k, v in props.items() if k not in required}
    optional["unknown_name"] = JUNK
    shaped = st.fixed_dictionaries(fixed, optional=optional)
    return st.one_of(shaped, shaped, st.dictionaries(st.sampled_from([*props, "other"] or ["other"]), JUNK, max_size=3))


# ---- every registered tool --------------------------------------------------------------------------------

SETTINGS_FOR_BUILD = {"email_sender": "bot@example.org"}


def registered_tools() -> list[Tool]:
    built = []
    for entry in main_tool_register.entries():
        keys = {key: SETTINGS_FOR_BUILD.get(key, "x") for key in entry.required_keys}
        try:
            made = main_tool_register.build(entry.name, **keys)
        except ConfigError:
            continue  # a tool that is not offered (wechat)
        if made.parameters is not None:
            built.append(made)
    return built


REGISTERED = registered_tools()


def test_every_registered_json_tool_is_compiled():
    assert len(REGISTERED) > 40
    missing = [t.name for t in REGISTERED if t.parameter_schema is not None and t.parameter_schema.checker is None]
    assert missing == []


@pytest.mark.parametrize("built", REGISTERED, ids=lambda t: t.name)
def test_registered_tool_matches_the_full_route(built: Tool):
    schema = built.parameter_schema
    assert schema is not None

    @SETTINGS
    @given(objects(schema.schema))
    def check(arguments: dict) -> None:
        assert_same(built, arguments)

    check()


# ---- hand-written edge cases ------------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0


@dataclasses.dataclass
class Shape:
    name: str
    points: list[Point]
    closed: bool = False


@tool(name="forecast")
def forecast(city: str, days: int, lat: float, unit: Literal["c", "f"], tags: list[str], alerts: bool = False) -> str:
    return city


@tool(name="draw")
def draw(shape: Shape, colour: Colour = Colour.RED, note: Optional[str] = None) -> str:
    return shape.name


RICH = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}$", "minLength": 2, "maxLength": 2},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "multipleOf": 2},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5, "multipleOf": 0.5},
        "mode": {"enum": [1, "one", True, None, 2.5, [1]]},
        "fixed": {"const": 1},
        "flag": {"enum": [True, "x"]},
        "zero": {"const": 0},
        "ids": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3, "uniqueItems": True},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        "either": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 0}]},
        "one": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "both": {"allOf": [{"type": "integer"}, {"minimum": 3}]},
        "maybe": {"type": ["string", "null"]},
        "free": {},
        "meta": {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1,
                 "maxProperties": 2, "dependentRequired": {"a": ["b"]}},
        "inner": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
                  "additionalProperties": False},
    },
    "required": ["code"],
    "additionalProperties": False,
}
rich = Tool.from_function({"name": "rich", "parameters": RICH}, lambda **kw: "ok")
open_tool = Tool.from_function({"name": "open", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}},
    "additionalProperties": {"type": "string", "maxLength": 3}}}, lambda **kw: "ok")
draft7 = Tool.from_function({"name": "draft7", "parameters": {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
    "properties": {"q": {"type": "string"}, "n": {"type": "integer", "default": 3}}, "required": ["q"]}},
    lambda **kw: "ok")
nullable = Tool.from_function({"name": "nullable", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "nullable": True}, "b": {"allOf": [{}]},
                                      "c": {"enum": ["x", None]}, "d": {"type": "string"}}}}, lambda **kw: "ok")

tree = Tool.from_function({"name": "tree", "parameters": {
    "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}, "spare": {"$ref": "#/$defs/Node"}},
    "required": ["root"], "$defs": {"Node": {"type": "object", "additionalProperties": False, "required": ["value"],
                                             "properties": {"value": {"type": "integer"},
                                                            "children": {"type": "array",
                                                                         "items": {"$ref": "#/$defs/Node"}}}}}}},
    lambda **kw: "ok")

legacy = Tool.from_function({"name": "legacy", "parameters": {  # keywords of older drafts: not read by 2020-12
    "type": "object", "properties": {"a": {"type": "array", "prefixItems": [{"type": "integer"}],
                                           "additionalItems": False, "id": "x"}, "b": {"type": "integer"}},
    "dependencies": {"b": ["a"]}}}, lambda **kw: "ok")


class IntKind(enum.IntEnum):
    ONE = 1


class Text(str):
    pass


EDGE_INPUTS = [
    {"city": "Paris", "days": 3, "lat": 48.85, "unit": "c", "tags": ["a", "b"], "alerts": True},
    {"city": "Paris", "days": "3", "lat": "48.85", "unit": "c", "tags": '["a"]', "alerts": "true"},
    {"city": "Paris", "days": 3.0, "lat": 48, "unit": "c", "tags": []},
    {"city": "Paris", "days": True, "lat": 1, "unit": "c", "tags": []},
    {"city": "Paris", "days": 3, "lat": 1, "unit": "k", "tags": []},
    {"city": "Paris", "days": 3, "lat": 1, "unit": "c", "tags": [], "alerts": None},
    {"city": "Paris", "days": 3, "lat": 1, "unit": "c", "tags": [], "colour": "red"},
    {"city": "Paris", "days": 3, "lat": 1, "unit": "c", "tags": [], "colour": "red", "size": 2},
    {"city": "Paris", "days": 3, "lat": float("nan"), "unit": "c", "tags": []},
    {"city": "Paris", "days": 2**70, "lat": float("inf"), "unit": "c", "tags": ("a",)},
    {"city": Text("Paris"), "days": IntKind.ONE, "lat": 1.5, "unit": "c", "tags": ["a"]},
    OrderedDict(city="Paris", days=3, lat=1.5, unit="c", tags=["a"]),
    {"days": 3},
    {},
]


@pytest.mark.parametrize("arguments", EDGE_INPUTS, ids=range(len(EDGE_INPUTS)))
def test_forecast_edge_inputs(arguments):
    assert_same(forecast, arguments)


DRAW_INPUTS = [
    {"shape": {"name": "tri", "points": [{"x": 1, "y": 2.5}, {"x": 2}], "closed": True}},
    {"shape": {"name": "tri", "points": [{"x": 1, "z": 2}]}},
    {"shape": {"name": "tri", "points": [{"x": 1.0}]}},
    {"shape": {"name": "tri", "points": [{"x": "1"}]}},
    {"shape": {"name": "tri", "points": []}, "colour": "blue", "note": None},
    {"shape": {"name": "tri", "points": []}, "colour": "green"},
    {"shape": '{"name": "tri", "points": []}'},
    {"shape": None},
]


@pytest.mark.parametrize("arguments", DRAW_INPUTS, ids=range(len(DRAW_INPUTS)))
def test_nested_dataclass_edge_inputs(arguments):
    assert_same(draw, arguments)


RICH_INPUTS = [
    {"code": "FR"}, {"code": "fr"}, {"code": "FRA"}, {"code": 12},
    {"code": "FR", "count": 4}, {"code": "FR", "count": 3}, {"code": "FR", "count": 12}, {"code": "FR", "count": "4"},
    {"code": "FR", "count": 4.0}, {"code": "FR", "ratio": 0.5}, {"code": "FR", "ratio": 1.5}, {"code": "FR", "ratio": 1},
    {"code": "FR", "mode": 1}, {"code": "FR", "mode": 1.0}, {"code": "FR", "mode": True}, {"code": "FR", "mode": False},
    {"code": "FR", "mode": None}, {"code": "FR", "mode": 2.5}, {"code": "FR", "mode": [1]}, {"code": "FR", "mode": "1"},
    {"code": "FR", "fixed": 1}, {"code": "FR", "fixed": 1.0}, {"code": "FR", "fixed": True},
    {"code": "FR", "flag": 1}, {"code": "FR", "flag": True}, {"code": "FR", "flag": 1.0}, {"code": "FR", "zero": False},
    {"code": "FR", "zero": 0.0}, {"code": "FR", "ratio": 0.7}, {"code": "FR", "ratio": 0.30000000000000004},
    {"code": "FR", "ids": [1, 2]}, {"code": "FR", "ids": [1, 1]}, {"code": "FR", "ids": []}, {"code": "FR", "ids": [1, True]},
    {"code": "FR", "ids": [1, 2, 3, 4]}, {"code": "FR", "ids": "[1, 2]"},
    {"code": "FR", "pair": ["a", 1]}, {"code": "FR", "pair": ["a", 1, 2]}, {"code": "FR", "pair": [1]},
    {"code": "FR", "either": "abc"}, {"code": "FR", "either": "abcd"}, {"code": "FR", "either": -1},
    {"code": "FR", "one": "a"}, {"code": "FR", "one": ["a"]}, {"code": "FR", "one": 1},
    {"code": "FR", "both": 3}, {"code": "FR", "both": 2}, {"code": "FR", "both": "3"},
    {"code": "FR", "maybe": None}, {"code": "FR", "maybe": 1}, {"code": "FR", "free": object()},
    {"code": "FR", "meta": {"a": 1, "b": 2}}, {"code": "FR", "meta": {"a": 1}}, {"code": "FR", "meta": {}},
    {"code": "FR", "meta": {"b": "x"}}, {"code": "FR", "inner": {"k": "v"}}, {"code": "FR", "inner": {"k": "v", "j": 1}},
    {"code": "FR", "inner": {}}, {"code": "FR", "count": None}, {"code": None}, {"code": "FR", "extra": 1},
]


@pytest.mark.parametrize("arguments", RICH_INPUTS, ids=range(len(RICH_INPUTS)))
def test_rich_schema_edge_inputs(arguments):
    assert_same(rich, arguments)


@pytest.mark.parametrize("built,arguments", [
    (open_tool, {"a": 1, "b": "xyz"}), (open_tool, {"a": 1, "b": "wxyz"}), (open_tool, {"b": 1}),
    (draft7, {"q": "x"}), (draft7, {"q": "x", "n": "4"}), (draft7, {"n": 1}),
    (nullable, {"a": None}), (nullable, {"b": None}), (nullable, {"c": None}), (nullable, {"d": None}),
    (nullable, {"a": None, "d": "x"}), (legacy, {"a": [1, "x"]}), (legacy, {"a": [1, 2, 3]}), (legacy, {"b": 1}),
    (tree, {"root": {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}, "spare": {"value": 0}}),
    (tree, {"root": {"value": 1, "children": [{"value": 2, "children": [{"value": "3"}]}]}}),
    (tree, {"root": {"value": 1, "children": [{"value": 2, "children": [{"value": 3, "x": 0}]}]}}),
    (tree, {"root": {"value": 1}, "spare": {"children": []}}),
], ids=range(18))
def test_open_nullable_and_recursive_schemas(built, arguments):
    assert_same(built, arguments)


def test_text_inputs_match_too():
    for text in ['{"city": "Paris", "days": 3, "lat": 1, "unit": "c", "tags": []}', "Paris", "", "{bad json"]:
        assert_same(forecast, text)


# ---- generated schemas -----------------------------------------------------------------------------------

LEAVES = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])}),
    st.fixed_dictionaries({"type": st.lists(st.sampled_from(["string", "integer", "number", "null", "boolean"]),
                                            min_size=1, max_size=3, unique=True)}),
    st.fixed_dictionaries({"enum": st.lists(st.sampled_from([1, 1.0, 2, True, False, None, "a", "b", [1], 0.5]),
                                            min_size=1, max_size=4)}),
    st.fixed_dictionaries({"const": st.sampled_from([1, 1.0, True, None, "a", 0])}),
    st.fixed_dictionaries({"type": st.just("integer")}, optional={
        "minimum": st.integers(-3, 3), "maximum": st.integers(-3, 3), "exclusiveMinimum": st.floats(-3, 3),
        "multipleOf": st.sampled_from([1, 2, 3, 0.5, 0.1])}),
    st.fixed_dictionaries({}, optional={"minimum": st.integers(-3, 3), "exclusiveMaximum": st.integers(-3, 3),
                                        "minLength": st.integers(0, 3), "maxLength": st.integers(0, 3),
                                        "pattern": st.sampled_from(["^a", "b$", "\\d"]),
                                        "multipleOf": st.sampled_from([2, 0.5])}),
    st.just({}),
    st.just(True),
)


def _composite(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("array")}, optional={
            "items": children, "minItems": st.integers(0, 2), "maxItems": st.integers(0, 3),
            "uniqueItems": st.booleans(), "prefixItems": st.lists(children, min_size=1, max_size=2)}),
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(
            st.sampled_from(["a", "b", "c"]), children, max_size=3)}, optional={
            "required": st.lists(st.sampled_from(["a", "b", "d"]), unique=True, max_size=2),
            "additionalProperties": st.one_of(st.booleans(), children),
            "maxProperties": st.integers(0, 3)}),
        st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"oneOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(children, min_size=1, max_size=2)}),
    )


NODES = st.recursive(LEAVES, _composite, max_leaves=6)
ROOTS = st.fixed_dictionaries(
    {"type": st.just("object"), "properties": st.dictionaries(st.sampled_from(["p", "q", "r", "s"]), NODES,
                                                              min_size=1, max_size=4)},
    optional={"required": st.lists(st.sampled_from(["p", "q", "x"]), unique=True, max_size=2),
              "additionalProperties": st.one_of(st.booleans(), NODES)})


@SETTINGS
@given(st.data())
def test_generated_schemas_match_the_full_route(data):
    raw = data.draw(ROOTS, label="schema")
    try:
        made = Tool.from_function({"name": "generated", "parameters": raw}, lambda **kw: "ok")
    except ConfigError:
        return
    schema = made.parameter_schema
    assert schema is not None
    for _ in range(4):
        assert_same(made, data.draw(objects(schema.schema), label="arguments"))


@SETTINGS
@given(st.data())
def test_a_yes_from_the_checker_is_a_yes_from_jsonschema(data):
    """Soundness, beside the route: when the checker says valid, jsonschema finds nothing and the
    coercions change nothing."""
    raw = data.draw(ROOTS, label="schema")
    try:
        schema = ParameterSchema(raw, "generated", compiled=False)
    except ConfigError:
        return
    check = compile_checker(schema.schema, refuse_unknown=True, drops_null=frozenset(
        name for name in schema.properties if name not in schema.required))
    if check is None:
        return
    for _ in range(4):
        arguments = data.draw(objects(schema.schema), label="arguments")
        if check(arguments):
            assert list(jsonschema.Draft202012Validator(schema.schema).iter_errors(arguments)) == []
            assert set(arguments) <= set(schema.properties)
            coerced, notes = schema.coerce(arguments)
            assert notes == [] and typed(coerced) == typed(arguments)


# ---- the compiled route is taken ------------------------------------------------------------------------


def test_valid_arguments_are_not_sent_to_jsonschema(monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("jsonschema was asked")

    for built in (forecast, draw, rich, tree):
        schema = built.parameter_schema
        assert schema is not None
        monkeypatch.setattr(type(schema), "validator", property(refuse))
    result = forecast.parse_arguments(EDGE_INPUTS[0])
    assert result == EDGE_INPUTS[0] and result.notes == []
    assert draw.parse_arguments(DRAW_INPUTS[0]) == DRAW_INPUTS[0]
    assert rich.parse_arguments({"code": "FR", "either": 2, "one": ["a"], "inner": {"k": "v"}})["inner"] == {"k": "v"}
    deep = {"root": {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}}
    assert tree.parse_arguments(deep) == deep
    coerced = forecast.parse_arguments({**EDGE_INPUTS[0], "days": "4"})  # coerced, then compiled again
    assert coerced["days"] == 4 and coerced.notes == ['days: "4" -> 4']


def test_unknown_names_keep_their_message():
    with pytest.raises(ToolInputError) as caught:
        forecast.parse_arguments({**EDGE_INPUTS[0], "colour": "red"})
    assert str(caught.value).startswith("Invalid input for tool 'forecast': unknown argument 'colour'. Accepted: "
                                        "city (required), days (required)")


def test_schemas_beyond_the_checker_get_none():
    for extra in ({"not": {"type": "string"}}, {"if": {}, "then": {}}, {"$id": "x"}, {"patternProperties": {}}):
        assert compile_checker({"type": "object", "properties": {"a": extra}}, refuse_unknown=True) is None
    overlapping = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert compile_checker({"type": "object", "properties": {"a": overlapping}}, refuse_unknown=True) is None


def test_the_result_is_a_fresh_dict():
    arguments = dict(EDGE_INPUTS[0])
    result = forecast.parse_arguments(arguments)
    result["city"] = "Lyon"
    assert arguments["city"] == "Paris"
