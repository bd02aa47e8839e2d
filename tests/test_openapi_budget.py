"""The size budget: many tools warn, large definitions are shortened, too large ones are refused."""

from __future__ import annotations

import json
import logging

import jsonschema
import pytest

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools
from chatgpt_tool_hub.tools.plugins.openapi._budget import tool_bytes

LOGGER = "chatgpt_tool_hub.tools.openapi"


def _doc(operations: int, example_chars: int = 0, description_chars: int = 10, depth: int = 1) -> dict:
    """A document of ``operations`` POST operations whose bodies carry examples and nested descriptions."""
    leaf: dict = {"type": "string", "description": "d" * description_chars}
    for level in range(depth):
        leaf = {"type": "object", "description": "n" * description_chars, "title": f"Level{level}",
                "properties": {"inner": leaf, "count": {"type": "integer", "example": 3}}}
    schema = {"type": "object", "required": ["name"],
              "properties": {"name": {"type": "string", "description": "the name", "example": "e" * example_chars},
                             "nested": leaf,
                             "x-note": {"type": "string"}}, "x-generated": True}
    paths = {f"/things{i}": {"post": {"operationId": f"make{i}", "summary": f"Make thing {i}",
                                      "requestBody": {"content": {"application/json": {"schema": schema}}}}}
             for i in range(operations)}
    return {"openapi": "3.0.3", "info": {"title": "Big", "version": "1"},
            "servers": [{"url": "https://big.example.invalid"}], "paths": paths}


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == LOGGER]


def test_many_tools_warn_and_suggest_the_operations_option(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        tools = load_openapi_tools(_doc(70))
    assert len(tools) == 70                                            # loaded all the same
    (warning,) = _warnings(caplog)
    assert "70 tools, more than max_tools (64)" in warning and "'operations'" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_openapi_tools(_doc(70), max_tools=100)
        load_openapi_tools(_doc(70), max_tools=0)                      # 0: no limit
        load_openapi_tools(_doc(70), operations=["make1", "make2"])
    assert _warnings(caplog) == []


def test_large_definitions_are_shortened_to_the_budget(caplog):
    doc = _doc(20, example_chars=5000, description_chars=300, depth=6)
    whole = load_openapi_tools(doc, max_schema_bytes=0)
    total = sum(tool_bytes(t) for t in whole)
    assert total > 50_000
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        tools = load_openapi_tools(doc, max_schema_bytes=total // 3)
    assert sum(tool_bytes(t) for t in tools) <= total // 3
    (warning,) = _warnings(caplog)
    assert "over max_schema_bytes" in warning and "shortened" in warning and "'operations'" in warning
    params = tools[0].parameters
    assert "example" not in json.dumps(params) and "x-note" in params["properties"]   # a property, not x-*
    assert params["required"] == ["name"] and params["properties"]["name"]["description"] == "the name"
    for tool in tools:
        jsonschema.Draft202012Validator.check_schema(tool.parameters)
        tool.parse_arguments({"name": "n"})                            # still a working tool


def test_definitions_too_large_even_shortened_are_refused():
    doc = _doc(12, description_chars=400, depth=2)                    # near the limit: the final check decides
    with pytest.raises(ConfigError, match="tool definitions take .* even shortened"):
        load_openapi_tools(doc, max_schema_bytes=sum(tool_bytes(t) for t in load_openapi_tools(doc, max_schema_bytes=0))
                           // 12)
    with pytest.raises(ConfigError) as info:
        load_openapi_tools(_doc(200, description_chars=50), max_schema_bytes=2000)
    text = str(info.value)
    assert "max_schema_bytes" in text and "'operations'" in text and "even shortened" in text
    counted = int(text.split("counted ", 1)[1].split(" ", 1)[0])
    assert counted < 200 and "of 200 operations" in text             # refused before all 200 tools were built
    assert len(load_openapi_tools(_doc(200), max_schema_bytes=0)) == 200


@pytest.mark.parametrize("option", [{"max_tools": "many"}, {"max_schema_bytes": -5}, {"max_tools": True}])
def test_bad_budget_options_are_config_errors(option):
    with pytest.raises(ConfigError, match=next(iter(option))):
        load_openapi_tools(_doc(1), **option)


def test_app_settings_give_the_default_budget(caplog):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, openapi_plugins=[_doc(5)], openapi_max_tools=3)
    assert any("more than max_tools (3)" in w for w in _warnings(caplog))
    with pytest.raises(ConfigError, match="max_schema_bytes"):
        AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, openapi_max_schema_bytes="1000",
                                openapi_plugins=[{"source": _doc(30)}])
    app = AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, openapi_max_schema_bytes=1000,
                                  openapi_plugins=[{"source": _doc(30), "max_schema_bytes": 0}])   # the entry wins
    assert len(app.tools) == 30
