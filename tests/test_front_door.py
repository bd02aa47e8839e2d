"""What a new user meets first: ``tool-hub run`` output and exit status, the proxy setting, misspelt settings."""

from __future__ import annotations

import json
import logging
import socket

import pytest

from chatgpt_tool_hub import cli
from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import main_tool_register, tool

from helpers import act, answer
from service_fixtures import CHATBOT_KWARGS

SECRET = "sk-front-door-secret-0123456789"


@pytest.fixture
def registered():
    """Register tools in the process-wide registry for one test (``tool-hub run`` builds from it)."""
    names: list[str] = []

    def register(made):
        main_tool_register.register_tool(made.name, made, [])
        names.append(made.name)
        return made

    yield register
    for name in names:
        main_tool_register.unregister_tool(name)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(["run", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---- tool-hub run goes through dispatch ---------------------------------------------------------------------


def test_run_redacts_configured_secrets_and_strips_control_characters(registered, capsys, monkeypatch):
    @tool(name="leaky-echo", description="Says what it knows.")
    def leaky(text: str) -> str:
        return f"key={SECRET} \x1b[31mred\x1b[0m\x07 bell {text}"

    registered(leaky)
    monkeypatch.setenv("LLM_API_KEY", SECRET)
    status, out, err = run_cli(capsys, "leaky-echo", "hello")
    assert status == cli.EXIT_OK, err
    assert SECRET not in out and "key=*** " in out
    assert "\x1b" not in out and "\x07" not in out and "red" in out and "hello" in out


def test_run_redacts_a_tools_own_key_from_dotenv(registered, capsys, tmp_path):
    @tool(name="acme-lookup", description="Looks things up.")
    def lookup(text: str) -> str:
        return f"sent token {SECRET} to acme"

    registered(lookup)
    (tmp_path / ".env").write_text(f"ACME_LOOKUP_TOKEN={SECRET}\n", encoding="utf-8")
    status, out, _ = run_cli(capsys, "acme-lookup", "x")
    assert status == cli.EXIT_OK and out.strip() == "sent token *** to acme"


def test_run_redacts_what_python_prints(capsys, monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", SECRET)
    status, out, _ = run_cli(capsys, "python", f"print('the key is {SECRET}')")
    assert status == cli.EXIT_OK and out.strip() == "the key is ***"


def test_run_output_is_cut_like_an_observation(registered, capsys, monkeypatch):
    @tool(name="chatty", description="Talks a lot.")
    def chatty(text: str) -> str:
        return "head " + "x" * 5000 + " tail"

    registered(chatty)
    monkeypatch.setenv("OBSERVATION_MAX_CHARS", "300")
    status, out, _ = run_cli(capsys, "chatty", "")
    assert status == cli.EXIT_OK
    assert out.startswith("head ") and out.rstrip().endswith(" tail") and "characters omitted" in out
    assert len(out) < 400


# ---- every failure: stderr and exit 1 -----------------------------------------------------------------------


def test_a_refused_url_is_a_failure(capsys):
    status, out, err = run_cli(capsys, "url-get", "http://127.0.0.1:1/")
    assert status == cli.EXIT_ERROR
    assert out == ""
    assert "url-get: refused to fetch 127.0.0.1: loopback address" in err and "url-get: url-get" not in err


@pytest.mark.parametrize("exc, shown", [(ToolExecutionError("the service is down"), "the service is down"),
                                        (ToolInputError("the input is not a date"), "the input is not a date"),
                                        (ValueError("boom"), "ValueError: boom")])
def test_every_tool_failure_prints_on_stderr_and_exits_1(registered, capsys, exc, shown):
    @tool(name="failing", description="Fails.")
    def failing(text: str) -> str:
        raise exc

    registered(failing)
    status, out, err = run_cli(capsys, "failing", "x")
    assert (status, out) == (cli.EXIT_ERROR, "")
    assert err.startswith("failing: ") and shown in err and "Traceback" not in err


def test_a_url_get_failure_is_an_error_step_in_an_app():
    app = AppFactory().create_app(tools_list=["url-get"], no_default=True,
                                  llm=ScriptedLLM([act("url-get", "http://127.0.0.1:1/"), answer("cannot")]))
    try:
        step = app.run("fetch it").steps[0]
    finally:
        app.close()
    assert step.status == "error" and step.observation.startswith("url-get: refused to fetch 127.0.0.1")


def test_url_get_alone_still_returns_its_failure_as_text():
    from chatgpt_tool_hub.tools.builtin.url_get import UrlGetTool

    assert UrlGetTool().run("http://127.0.0.1:1/").startswith("url-get: refused to fetch 127.0.0.1")


# ---- the proxy ------------------------------------------------------------------------------------------------


def _port_of(url: str) -> int:
    return int(url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def test_a_bare_host_port_proxy_carries_the_llm_requests(chat_server):
    """chatgpt-tool-hub's example writes the proxy without a scheme; the chat server plays the proxy here."""
    chat_server.replies = [answer("through the proxy")]
    app = AppFactory().create_app(tools_list=[], no_default=True, llm_api_key="k", max_retries=0,
                                  llm_api_base_url="http://llm.example.test/v1",
                                  proxy=f"127.0.0.1:{_port_of(chat_server.url)}")
    try:
        assert app.ask("hi") == "through the proxy"
    finally:
        app.close()
    assert chat_server.requests[-1]["headers"]["host"] == "llm.example.test"
    assert app.config["proxy"] == f"http://127.0.0.1:{_port_of(chat_server.url)}"


def test_a_bare_host_port_proxy_works_at_the_command_line(chat_server, monkeypatch, capsys):
    chat_server.replies = [answer("fine")]
    monkeypatch.setenv("PROXY", f"127.0.0.1:{_port_of(chat_server.url)}")
    monkeypatch.setenv("LLM_API_BASE_URL", "http://llm.example.test/v1")
    monkeypatch.setenv("MAX_RETRIES", "0")
    assert cli.main(["ask", "hi"]) == cli.EXIT_OK
    assert capsys.readouterr().out.strip() == "fine"


def test_a_bare_host_port_proxy_carries_the_network_tools(chat_server, monkeypatch):
    real_getaddrinfo = socket.getaddrinfo

    def resolve(host, *args, **kwargs):  # the target is checked as public; the proxy connects to it
        if host == "public.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80))]
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with AppFactory().create_tool("url-get", proxy=f"127.0.0.1:{_port_of(chat_server.url)}") as single:
        outcome = single.run("http://public.example/v1/models")
    assert outcome.status == "ok" and "test-model" in outcome.observation


def test_a_bare_proxy_in_pure_mode_and_its_password_is_a_secret():
    from chatgpt_tool_hub.config import secret_values
    from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM
    from chatgpt_tool_hub.tools.builtin.url_get import UrlGetTool

    assert UrlGetTool.from_config(proxy="127.0.0.1:7890").proxy == "http://127.0.0.1:7890"
    assert OpenAICompatibleLLM("m", api_key="k", base_url="http://127.0.0.1:9/v1",
                               proxy="127.0.0.1:7890").proxy == "http://127.0.0.1:7890"
    assert "pw-in-proxy" in secret_values({"proxy": "me:pw-in-proxy@127.0.0.1:7890"})


@pytest.mark.parametrize("proxy, why", [("ftp://127.0.0.1:21", "scheme 'ftp'"), ("http://127.0.0.1:port", "port"),
                                        ("http://:8080", "no host"), ("127.0.0.1 7890", "blank")])
def test_a_proxy_that_cannot_be_used_fails_at_create_app(proxy, why):
    with pytest.raises(ConfigError, match=why) as caught:
        AppFactory().create_app(llm=ScriptedLLM([]), proxy=proxy)
    assert caught.value.key == "proxy"


def test_a_socks_proxy_without_its_package_fails_at_create_app(monkeypatch):
    from chatgpt_tool_hub.apps import settings

    monkeypatch.setattr(settings, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"httpx\[socks\]") as caught:
        AppFactory().create_app(llm_api_key="k", proxy="socks5://127.0.0.1:1080")
    assert caught.value.key == "proxy"
    with pytest.raises(ConfigError, match=r"requests\[socks\]"):  # the tools need it even with an LLM object
        AppFactory().create_app(llm=ScriptedLLM([]), proxy="socks5://127.0.0.1:1080")


def test_a_bad_proxy_is_one_line_at_the_command_line(monkeypatch, capsys):
    monkeypatch.setenv("PROXY", "ftp://127.0.0.1:21")
    monkeypatch.setenv("LLM_API_BASE_URL", "http://127.0.0.1:9/v1")
    assert cli.main(["ask", "hi"]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith("configuration error: setting 'proxy'") and "the environment" in err


# ---- misspelt settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, meant", [("thinkdepth", "think_depth"), ("think_dept", "think_depth"),
                                        ("temprature", "temperature"), ("openai_api_key", "llm_api_key"),
                                        ("THINK_DEPT", "think_depth")])
def test_a_misspelt_keyword_is_a_config_error(key, meant):
    with pytest.raises(ConfigError, match=f"did you mean '{meant}'") as caught:
        AppFactory().create_app(llm=ScriptedLLM([]), **{key: 5})
    assert caught.value.key == key and "keyword argument" in str(caught.value)


def test_a_misspelt_key_in_config_json_is_a_config_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"kwargs": {"think_dept": 5}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="did you mean 'think_depth'") as caught:
        AppFactory().create_app(llm=ScriptedLLM([]))
    assert caught.value.key == "think_dept" and "config.json" in str(caught.value)


def test_a_misspelt_key_in_init_env_is_a_config_error():
    factory = AppFactory().init_env(no_defualt=True)
    with pytest.raises(ConfigError, match="did you mean 'no_default'"):
        factory.create_app(llm=ScriptedLLM([]))


def test_the_environment_is_not_checked(monkeypatch):
    monkeypatch.setenv("THINK_DEPT", "5")
    app = AppFactory().create_app(llm=ScriptedLLM([]), tools_list=[], no_default=True)
    assert app.config["think_depth"] == 3


def test_per_tool_and_plugin_keys_are_kept(caplog):
    caplog.set_level(logging.WARNING, logger="chatgpt_tool_hub")
    app = AppFactory().create_app(llm=ScriptedLLM([]), tools_list=[], no_default=True, python_timeout=5,
                                  image_captioning_device="cpu", calc_model_name="m", planner_catalog="c.json")
    assert app.config["python_timeout"] == 5 and app.config["calc_model_name"] == "m"
    assert not [r for r in caplog.records if "is not a setting" in r.getMessage()]


def test_an_unknown_key_close_to_nothing_is_kept_with_one_warning(caplog):
    caplog.set_level(logging.WARNING, logger="chatgpt_tool_hub")
    for _ in range(2):
        app = AppFactory().create_app(llm=ScriptedLLM([]), tools_list=[], no_default=True, zorblax_widgets=3)
        assert app.config["zorblax_widgets"] == 3
    warned = [r.getMessage() for r in caplog.records if "zorblax_widgets" in r.getMessage()]
    assert len(warned) == 1 and "is not a setting" in warned[0]


def test_the_chatbot_plugins_keywords_pass_without_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="chatgpt_tool_hub")
    factory = AppFactory().init_env(**CHATBOT_KWARGS)
    factory.create_app(llm=ScriptedLLM([]), tools_list=[], **CHATBOT_KWARGS)
    assert not [r for r in caplog.records if "is not a setting" in r.getMessage()]


def test_a_misspelt_key_fails_tool_hub_run_in_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"kwargs": {"workspace_dri": "ws"}}), encoding="utf-8")
    status, out, err = run_cli(capsys, "python", "print(1)")
    assert (status, out) == (cli.EXIT_CONFIG, "")
    assert "unknown setting 'workspace_dri'" in err and "did you mean 'workspace_dir'" in err
