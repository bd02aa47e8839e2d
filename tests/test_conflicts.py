"""Mutually exclusive tools: ``Tool.conflicts_with`` (names or ``group:<name>``) checked by ``create_app``."""

from __future__ import annotations

import logging

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool, ToolRegistry


class Plain(Tool):
    description = "A tool for the conflict tests."
    closed = 0

    def __init__(self, name: str, conflicts: tuple[str, ...] = ()):
        self.name = name
        self.conflicts_with = conflicts
        self.closed = 0

    def _run(self, text: str) -> str:
        return f"{self.name}: {text}"

    def close(self) -> None:
        self.closed += 1


def _app(tools, registry=None, **kwargs):
    factory = AppFactory(registry=registry) if registry is not None else AppFactory()
    return factory.create_app(tools_list=tools, llm=ScriptedLLM([]), **{"no_default": True, **kwargs})


def test_a_tool_has_no_conflicts_by_default():
    assert Tool.conflicts_with == ()
    app = _app([Plain("a"), Plain("b")])
    assert app.tool_names == ["a", "b"]


def test_two_listed_tools_that_conflict_by_name_are_refused_with_both_names_and_the_reason():
    with pytest.raises(ConfigError) as err:
        _app([Plain("bing-like", ("google-like",)), Plain("google-like")])
    text = str(err.value)
    assert "'bing-like'" in text and "'google-like'" in text
    assert "declares conflicts_with 'google-like'" in text
    assert "Remove one of them from tools_list" in text
    assert err.value.key == "tools_list"


def test_the_conflict_counts_whichever_side_declares_it_and_ignores_case():
    with pytest.raises(ConfigError, match="'Writer' declares conflicts_with 'READER'"):
        _app([Plain("reader"), Plain("Writer", ("READER",))])


def test_tools_of_one_group_are_refused_and_other_groups_are_not():
    with pytest.raises(ConfigError) as err:
        _app([Plain("sd-local", ("group:image-generator",)), Plain("sd-remote", ("group:image-generator",))])
    assert "both are in the group 'image-generator'" in str(err.value)
    assert "one tool of a group" in str(err.value)
    app = _app([Plain("sd-local", ("group:image-generator",)), Plain("search", ("group:search",))])
    assert app.tool_names == ["sd-local", "search"]


def test_one_group_member_alone_is_fine():
    # "group:x" on one tool only is a group of one: nothing to conflict with
    app = _app([Plain("a", ("group:x",)), Plain("b")])
    assert app.tool_names == ["a", "b"]


def test_registry_tools_built_before_a_refusal_are_closed():
    built: list[Plain] = []

    def make(context):
        tool = Plain("heavy", ("light",))
        built.append(tool)
        return tool

    registry = ToolRegistry()
    registry.register_tool("heavy", make, takes_context=True)
    registry.register_tool("light", lambda context: Plain("light"), takes_context=True)
    with pytest.raises(ConfigError):
        _app(["heavy", "light"], registry=registry)
    assert built and built[0].closed == 1     # nothing the refused app opened stays open


def test_a_default_tool_gives_way_to_a_listed_tool_that_conflicts_with_it(caplog):
    defaults: list[Plain] = []

    def make_default(context):
        tool = Plain("web-fetch")
        defaults.append(tool)
        return tool

    registry = ToolRegistry()
    registry.register_tool("web-fetch", make_default, default=True, takes_context=True)
    registry.register_tool("calc", lambda context: Plain("calc"), default=True, takes_context=True)
    offline = Plain("offline-fetch", ("web-fetch",))
    with caplog.at_level(logging.WARNING, logger="chatgpt_tool_hub.apps"):
        app = _app([offline], registry=registry, no_default=False)
    assert app.tool_names == ["calc", "offline-fetch"]    # the listed tool wins, the other default stays
    assert "default tool 'web-fetch' left out: it conflicts with 'offline-fetch'" in caplog.text
    assert defaults[0].closed == 1                         # built for this app, dropped, closed

    app = _app([], registry=registry, no_default=False)   # nothing listed: the defaults are all there
    assert app.tool_names == ["web-fetch", "calc"]


def test_a_default_tool_listed_by_name_is_a_listed_tool():
    registry = ToolRegistry()
    registry.register_tool("web-fetch", lambda context: Plain("web-fetch"), default=True, takes_context=True)
    with pytest.raises(ConfigError, match="'web-fetch' and 'offline-fetch'"):
        _app(["web-fetch", Plain("offline-fetch", ("web-fetch",))], registry=registry, no_default=False)


def test_a_later_default_that_conflicts_with_an_earlier_default_is_left_out():
    registry = ToolRegistry()
    registry.register_tool("one", lambda context: Plain("one", ("group:g",)), default=True, takes_context=True)
    registry.register_tool("two", lambda context: Plain("two", ("group:g",)), default=True, takes_context=True)
    app = _app([], registry=registry, no_default=False)
    assert app.tool_names == ["one"]
