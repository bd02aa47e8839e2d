"""One context per app: two apps in one process never share an expert budget, a registry, a workspace or
secrets; tool factories get the app's context, not every setting; logging is changed for the package only."""

from __future__ import annotations

import ast
import gc
import logging
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.apps.logs import PACKAGE_LOGGERS, redaction_filter
from chatgpt_tool_hub.config import Settings
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool, ToolRegistry, main_tool_register
from chatgpt_tool_hub.tools.context import AppContext, pure_context

from helpers import act, answer

PACKAGE = Path(__file__).resolve().parents[1] / "chatgpt_tool_hub"


def make(tools=(), replies=(), **kw):
    return AppFactory().create_app(tools_list=list(tools), llm=ScriptedLLM(list(replies)), no_default=True, **kw)


def expert(app):
    return next(t for t in app.tools if t.name == "image-classification")


def test_two_apps_keep_their_own_expert_budget_and_models(tmp_path):
    small = make(["image-classification"], expert_memory_budget_mb=512, workspace_dir=str(tmp_path / "a"))
    other = make(["image-classification"], workspace_dir=str(tmp_path / "b"))
    assert expert(small).manager.memory_budget_mb == 512  # creating the second app did not reset it
    assert expert(other).manager.memory_budget_mb == 0
    assert expert(small).manager is not expert(other).manager
    assert expert(small).manager is small.context.models


def test_two_apps_keep_their_own_registry(tmp_path):
    one = make(["python"], workspace_dir=str(tmp_path / "a"))
    two = make(["python"], workspace_dir=str(tmp_path / "b"))
    assert one.context.registry is not two.context.registry
    assert one.context.registry is not main_tool_register
    one.context.registry.register_tool("only-in-one", Tool(), [])
    assert "only-in-one" in one.context.registry and "only-in-one" not in two.context.registry
    assert "only-in-one" not in main_tool_register
    one.register_subtree("helper", ["python"])
    assert "helper" in one.tool_names and "helper" not in two.tool_names


def test_two_apps_keep_their_own_workspace(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    one = make(["python", "read-file"], [act("python", "open('mine.txt', 'w').write('from one')"), answer("ok"),
                                         act("read-file", "mine.txt"), answer("seen")], workspace_dir=str(a))
    two = make(["read-file"], [act("read-file", "mine.txt"), answer("nothing")], workspace_dir=str(b))
    assert one.context.workspace == a.resolve() and two.context.workspace == b.resolve()
    one.ask("write")
    assert (a / "mine.txt").read_text() == "from one"
    assert "from one" in one.run("read").steps[0].observation
    assert "there is no file 'mine.txt'" in two.run("read").steps[0].observation
    one.close()


def test_a_context_factory_sees_its_own_keys_only_and_a_05_factory_gets_every_setting(tmp_path):
    seen: dict[str, object] = {}

    class Probe(Tool):
        name = "probe"

        @classmethod
        def from_context(cls, context: AppContext) -> "Probe":
            seen["context"] = context
            return cls()

    def old_style(**kwargs):
        seen["kwargs"] = kwargs
        tool = Tool()
        tool.name = "old-style"
        return tool

    registry = ToolRegistry()
    registry.register_tool("probe", Probe.from_context, ["probe_api_key"], takes_context=True)
    registry.register_tool("old-style", old_style, [])
    AppFactory(registry).create_app(tools_list=["probe", "old-style"], llm=ScriptedLLM([]), no_default=True,
                                    llm_api_key="sk-llm-key-1234", probe_api_key="probe-key-5678",
                                    bing_subscription_key="bing-key-9012", workspace_dir=str(tmp_path))
    settings = seen["context"].settings
    assert settings.get("probe_api_key") == "probe-key-5678"
    assert settings.get("llm_api_key") is None and "llm_api_key" not in settings
    assert settings.get("bing_subscription_key") is None and "bing_subscription_key" not in dict(settings)
    assert settings.get("think_depth") == 3 and settings["workspace_dir"] == str(tmp_path)
    assert seen["context"].llm is not None  # the app's LLM object instead of its key
    with pytest.raises(TypeError):
        settings["think_depth"] = 4  # read-only
    kwargs = seen["kwargs"]  # chatgpt-tool-hub 0.5 passed every setting to every factory: still so
    assert kwargs["llm_api_key"] == "sk-llm-key-1234" and kwargs["bing_subscription_key"] == "bing-key-9012"


def test_pure_mode_factories_take_keywords_for_both_kinds():
    factory, keys = main_tool_register.get_registered_tool()["python"]
    tool = factory(python_timeout="7", workspace_dir="", llm_api_key="")
    try:
        assert tool.timeout == 7.0
    finally:
        tool.close()


def test_browser_and_summary_build_their_tools_from_the_apps_registry(tmp_path):
    built = []

    class FakeUrlGet(Tool):
        name = "url-get"
        use_summary = True

        def _run(self, text: str) -> str:
            return f"page at {text}: it says hello"

    registry = main_tool_register.copy()
    registry.register_tool("url-get", lambda context: built.append(context) or FakeUrlGet(), [],
                           takes_context=True)
    browse = [act("url-get", "https://example.test/"), answer("it says hello")]
    app = AppFactory(registry).create_app(tools_list=["browser", "summary"], no_default=True,
                                          llm=ScriptedLLM([act("browser", "read example.test"), *browse,
                                                           answer("done")]),
                                          workspace_dir=str(tmp_path))
    browser = next(t for t in app.tools if t.name == "browser")
    assert isinstance(browser.tools[0], FakeUrlGet)
    assert app.ask("what does example.test say?") == "done"
    summary = next(t for t in app.tools if t.name == "summary")
    assert isinstance(summary.app.build_tool("url-get"), FakeUrlGet)
    assert built and all(c.registry is app.context.registry for c in built)


def test_settings_view_is_typed_and_scoped():
    view = Settings({"python_timeout": "5", "bing_subscription_key": "k" * 8, "hf_token": "t" * 8, "x": ""})
    assert view.get("python_timeout", 1.0) == 5.0 and view.get("x", "default") == "default"
    scoped = view.for_tool("bing-search", ["bing_subscription_key"])
    assert scoped.get("bing_subscription_key") == "k" * 8 and scoped.get("hf_token") is None
    assert view.for_tool("image-classification", ["hf_token"]).get("bing_subscription_key") is None
    assert "k" * 8 not in repr(view) and "t" * 8 not in repr(view)


def test_logging_changes_nothing_outside_the_package():
    factory_before = logging.getLogRecordFactory()
    root_handlers = list(logging.getLogger().handlers)
    other = logging.getLogger("urllib3.connectionpool")
    other_filters = list(other.filters)
    app = make([], bing_subscription_key="bing-key-only-here-7788")
    assert logging.getLogRecordFactory() is factory_before
    assert logging.getLogger().handlers == root_handlers and other.filters == other_filters
    assert "bing-key-only-here-7788" in redaction_filter().secrets
    del app
    gc.collect()
    assert "bing-key-only-here-7788" not in redaction_filter().secrets  # the set shrinks with the apps


def test_a_logger_made_later_under_the_package_is_redacted(caplog):
    app = make([], bing_subscription_key="bing-key-late-logger-3344")
    with caplog.at_level(logging.WARNING):
        logging.getLogger("chatgpt_tool_hub.tools.plugins.made_later").warning("key %s", "bing-key-late-logger-3344")
    assert "bing-key-late-logger-3344" not in caplog.text and "key ***" in caplog.text
    assert app.context.redactor


def test_every_logger_of_the_package_carries_the_filter():
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getLogger" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("chatgpt_tool_hub"):
                    names.add(arg.value)
    assert names and names <= set(PACKAGE_LOGGERS), names - set(PACKAGE_LOGGERS)


def test_pure_context_is_made_from_keywords():
    context = pure_context({"workspace_dir": "", "llm_api_key": "sk-pure-1234", "proxy": "http://u:pw99@p.test:1"})
    assert context.registry is main_tool_register and context.models is None
    assert context.redactor.redact("sk-pure-1234 pw99") == "*** ***"
    assert context.http.proxy == "http://u:pw99@p.test:1" and context.workspace == Path("./workspace").resolve()


def test_only_the_subtree_tool_owns_an_engine_and_the_demo_does_not_import_the_cli():
    def imports(rel: str) -> set[str]:
        tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                found.add("." * node.level + (node.module or ""))
        return found

    for path in (PACKAGE / "tools").rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel != "tools/subtree.py":
            assert not any("engine" in m for m in imports(rel)), f"{rel} imports the engine"
    assert not any(m.endswith("cli") for m in imports("demo.py"))  # both use the console module
    assert ".console" in imports("demo.py") and ".console" in imports("cli.py")


def test_closing_an_app_unloads_its_own_models_only(tmp_path):
    one = make(["image-classification"], workspace_dir=str(tmp_path / "a"))
    two = make(["image-classification"], workspace_dir=str(tmp_path / "b"))
    for app in (one, two):
        app.context.models.get(("m", "t", "cpu", "float32"), lambda: object(), size_mb=1)
    one.close()
    assert not one.context.models.is_loaded(("m", "t", "cpu", "float32"))
    assert two.context.models.is_loaded(("m", "t", "cpu", "float32"))


def test_a_tool_left_out_for_its_name_is_named_in_a_warning(caplog):
    from chatgpt_tool_hub.tools import tool as make_tool

    first = make_tool(name="same", description="first")(lambda text: "1")
    second = make_tool(name="same", description="second")(lambda text: "2")
    with caplog.at_level(logging.WARNING, logger="chatgpt_tool_hub.apps"):
        app = make([first, second])
    assert app.tools == [first] and "two tools are named 'same'" in caplog.text
