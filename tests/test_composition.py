"""AppFactory is the only composition root: front ends ask it for settings, LLMs and tools."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools import Tool
from chatgpt_tool_hub.tools.registry import ToolRegistry

PACKAGE = Path(__file__).resolve().parents[1] / "chatgpt_tool_hub"
FRONT_ENDS = ["cli.py", "server/app.py", "server/cli.py", "console/__init__.py", "console/terminal.py"]
# what only apps/ does: read settings, build contexts, LLMs and tools
COMPOSING = re.compile(r"\b(build_context|build_llm|load_settings|pure_context)\b|\.build\(|_remote_tools")


@pytest.mark.parametrize("module", FRONT_ENDS)
def test_front_ends_never_compose(module):
    text = (PACKAGE / module).read_text(encoding="utf-8")
    found = sorted({m.group(0) for m in COMPOSING.finditer(text)})
    assert found == [], f"{module} composes itself ({', '.join(found)}): ask AppFactory"


class Recorder(Tool):
    """A tool that shows the context it was built with and whether it was closed."""

    name = "recorder"
    description = "Says its workspace and setting."
    needs_context = False

    def __init__(self, context):
        self.context = context
        self.closed = False

    def _run(self, text: str) -> str:
        return f"{self.context.workspace.name} {self.context.settings.get('recorder_mode', 'none')} {text}"

    def close(self) -> None:
        self.closed = True


def registry_with_recorder() -> tuple[ToolRegistry, list[Recorder]]:
    built: list[Recorder] = []
    registry = ToolRegistry()
    registry.register_tool("recorder", lambda context: built.append(Recorder(context)) or built[-1], [],
                           takes_context=True)
    return registry, built


def test_create_tool_builds_with_an_app_context_and_closes_it(tmp_path):
    registry, built = registry_with_recorder()
    single = AppFactory(registry).create_tool("Recorder", workspace_dir=str(tmp_path / "ws"), recorder_mode="fast")
    with single:
        outcome = single.run("go")
    assert (outcome.status, outcome.observation) == ("ok", "ws fast go")
    assert single.context.workspace == (tmp_path / "ws").resolve()
    assert built[0].closed


def test_create_tool_defaults_yield_to_configured_values(tmp_path, monkeypatch):
    registry, _ = registry_with_recorder()
    factory = AppFactory(registry)
    with factory.create_tool("recorder", defaults={"workspace_dir": str(tmp_path / "here")}) as single:
        assert single.context.workspace == (tmp_path / "here").resolve()
    monkeypatch.setenv("WORKSPACE_DIR", str(tmp_path / "set"))
    with factory.create_tool("recorder", defaults={"workspace_dir": str(tmp_path / "here")}) as single:
        assert single.context.workspace == (tmp_path / "set").resolve()
        assert single.config.sources["workspace_dir"] == "environment"


def test_create_tool_ignores_engine_settings_and_init_env_defaults_apply(monkeypatch):
    registry, _ = registry_with_recorder()
    monkeypatch.setenv("THINK_DEPTH", "not a number")
    factory = AppFactory(registry).init_env(recorder_mode="slow")
    with factory.create_tool("recorder") as single:
        assert single.run("x").observation.endswith("slow x")


def test_create_tool_unknown_name_says_did_you_mean():
    registry, _ = registry_with_recorder()
    with pytest.raises(ConfigError, match="unknown tool 'recoder'; did you mean 'recorder'") as caught:
        AppFactory(registry).create_tool("recoder")
    assert caught.value.key == "tool"


def test_create_llm_builds_what_create_app_would(chat_server):
    factory = AppFactory().init_env(llm_api_base_url=chat_server.url, model_name="from-init-env")
    llm = factory.create_llm(temperature=0.5)
    assert (llm.model_name, llm.temperature, llm.base_url) == ("from-init-env", 0.5, chat_server.url)
    assert factory.create_llm(factory.resolve_settings(model_name="other")).model_name == "other"


def test_create_server_resolves_its_settings_through_the_factory():
    pytest.importorskip("fastapi")
    from chatgpt_tool_hub.server import create_server

    with pytest.raises(ConfigError, match="did you mean 'serve_port'"):
        create_server(llm_factory=lambda: None, serve_prot=9000)
