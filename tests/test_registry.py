"""Tool registry, the @tool decorator and entry points."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.errors import ConfigError, MissingKeyError, ToolInputError
from chatgpt_tool_hub.tools import Tool, ToolRegistry, main_tool_register, tool
from chatgpt_tool_hub.tools import registry as registry_module


class KeyTool(Tool):
    name = "needs-key"
    description = "needs a key"

    def __init__(self, api_key):
        self.api_key = api_key

    def _run(self, text):
        return f"ran {text}"


def key_factory(**kwargs):
    return KeyTool(kwargs["needs_key_api_key"])


def test_register_get_unregister_with_chatgpt_tool_hub_names():
    reg = ToolRegistry()
    reg.register_tool("needs-key", key_factory, ["needs_key_api_key"])
    assert reg.get_registered_tool_names() == ["needs-key"]
    factory, keys = reg.get_registered_tool()["needs-key"]
    assert keys == ["needs_key_api_key"]
    assert factory(needs_key_api_key="k", junk="", other=None).run(" hi") == "ran  hi"
    reg.unregister_tool("needs-key")
    assert reg.get_registered_tool_names() == []


def test_missing_required_key_names_it_and_how_to_set_it():
    reg = ToolRegistry()
    reg.register_tool("needs-key", key_factory, ["needs_key_api_key"])
    with pytest.raises(MissingKeyError) as info:
        reg.build("needs-key", needs_key_api_key="", many=1, unrelated="x")
    assert info.value.key == "needs_key_api_key"
    assert "NEEDS_KEY_API_KEY" in str(info.value) and "create_app" in str(info.value)


def test_missing_key_only_matters_for_a_tool_that_was_asked_for():
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    reg = ToolRegistry()
    reg.register_tool("needs-key", key_factory, ["needs_key_api_key"])
    reg.register_tool("echo", tool(name="echo")(lambda text: text))
    app = AppFactory(registry=reg).create_app(tools_list=["echo"], llm=ScriptedLLM([]), no_default=True)
    assert app.tool_names == ["echo"]
    with pytest.raises(MissingKeyError):
        AppFactory(registry=reg).create_app(tools_list=["needs-key"], llm=ScriptedLLM([]), no_default=True)


def test_build_resolves_case_and_rejects_unknown_names_without_importing():
    reg = ToolRegistry()
    reg.register_tool("Echo", tool(name="Echo")(lambda text: text))
    assert reg.build("echo").name == "Echo"
    for name in ("__import__", "../x", "os.system", ""):
        with pytest.raises(ConfigError, match="unknown tool"):
            reg.build(name)


def test_factory_must_return_a_tool():
    reg = ToolRegistry()
    reg.register_tool("bad", lambda **kw: "not a tool")
    with pytest.raises(ConfigError, match="not a Tool"):
        reg.build("bad")


def test_main_registry_has_builtins_and_copies_are_independent():
    assert "python" in main_tool_register.get_registered_tool_names()
    copy = main_tool_register.copy()
    copy.register_tool("only-in-copy", tool(name="only-in-copy")(lambda text: text))
    assert "only-in-copy" not in main_tool_register.get_registered_tool_names()


class _FakeEntryPoint:
    def __init__(self, name, value, obj=None, error=None):
        self.name, self.value, self._obj, self._error = name, value, obj, error

    def load(self):
        if self._error:
            raise self._error
        return self._obj


def test_entry_points_register_plugins_and_broken_ones_are_skipped(monkeypatch, caplog):
    plugin_tool = tool(name="plugin-tool")(lambda text: "plugin says " + text)

    def register(registry):
        registry.register_tool("from-register", lambda **kw: plugin_tool)

    eps = [
        _FakeEntryPoint("a", "pkg_a:register", register),
        _FakeEntryPoint("b", "pkg_b:tool", plugin_tool),
        _FakeEntryPoint("c", "pkg_c:broken", error=ImportError("missing dependency")),
        _FakeEntryPoint("d", "pkg_d:thing", 42),
    ]
    import importlib.metadata as md

    monkeypatch.setattr(md, "entry_points", lambda group=None: eps if group == registry_module.ENTRY_POINT_GROUP else [])
    reg = ToolRegistry(discover=True)
    names = reg.get_registered_tool_names()
    assert {"from-register", "plugin-tool", "python", "image-captioning"} <= set(names)  # bundled sets still load
    assert reg.build("plugin-tool").run("hi") == "plugin says hi"
    assert "could not be loaded" in caplog.text


def test_tool_decorator_builds_schema_from_signature_and_docstring():
    @tool(name="add")
    def add(a: int, b: float = 1.5, flag: bool = False) -> float:
        """Add numbers.

        Args:
            a: the first number
            b: the second number
        """
        return a + b

    assert add.description == "Add numbers."
    props = add.parameters["properties"]
    assert props["a"] == {"type": "integer", "description": "the first number"}
    assert props["b"]["type"] == "number" and props["b"]["default"] == 1.5
    assert add.parameters["required"] == ["a"]
    assert add.run('{"a": 2}') == "3.5"
    assert add.run({"a": 1, "b": 2}) == "3"
    assert add.run("{'a': 1}") == "2.5"  # a Python-literal object works too
    assert add(1, 2) == 3  # still callable


@pytest.mark.parametrize("bad, message", [
    ('{"b": 1}', "'a' is a required property"),
    ('{"a": "x"}', "is not of type 'integer'"),
    ('{"a": 1, "zzz": 2}', r"unknown argument 'zzz'\. Accepted: a \(required\), b\."),
    ("plain text", "expects a JSON object"),
])
def test_tool_input_errors_say_what_was_wrong(bad, message):
    @tool(name="add")
    def add(a: int, b: int = 0) -> int:
        """Add."""
        return a + b

    with pytest.raises(ToolInputError, match=message):
        add.run(bad)


def test_single_parameter_tool_takes_text_verbatim():
    @tool(name="shout")
    def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    assert shout.run('  {not json} "quoted" ') == '  {NOT JSON} "QUOTED" '
    assert shout.run('{"text": "json works"}') == "JSON WORKS"
    with pytest.raises(ToolInputError, match="unknown argument 'query'. Accepted: text"):
        shout.run({"query": "other key"})  # a JSON object is taken as it is: no guessing which key was meant


def test_outputs_are_rendered_as_text():
    assert tool(name="n")(lambda text: None).run("x") == "(the tool returned no output)"
    assert tool(name="d")(lambda text: {"a": "中"}).run("x") == '{"a": "中"}'


def test_bare_decorator_and_openai_schema():
    @tool
    def get_time(zone: str) -> str:
        """Current time in a zone."""
        return zone

    assert get_time.name == "get-time"
    schema = get_time.openai_schema()
    assert schema["function"]["name"] == "get-time"
    assert schema["function"]["parameters"]["required"] == ["zone"]
