"""Configuration: precedence, typing, errors that name the key."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.apps.settings import load_settings
from chatgpt_tool_hub.config import coerce, get_typed, is_secret_key
from chatgpt_tool_hub.errors import ConfigError


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults():
    cfg = load_settings({}, environ={})
    assert cfg["think_depth"] == 3 and cfg["model_name"] == "gpt-4o-mini"
    assert cfg["debug"] is False and cfg["temperature"] == 0.0 and cfg["request_timeout"] == 120.0
    assert cfg.tools is None


def test_precedence_kwargs_env_dotenv_configjson_defaults(tmp_path):
    write(tmp_path / "config.json", json.dumps({"tools": ["python"], "kwargs": {
        "think_depth": 1, "model_name": "from-json", "temperature": 0.1, "request_timeout": 11, "debug": True}}))
    write(tmp_path / ".env", "THINK_DEPTH=2\nMODEL_NAME=from-dotenv\nTEMPERATURE=0.2\n")
    environ = {"THINK_DEPTH": "4", "MODEL_NAME": "from-env"}
    cfg = load_settings({"think_depth": "5"}, environ=environ, cwd=tmp_path)
    assert cfg["think_depth"] == 5 and cfg.sources["think_depth"] == "keyword"
    assert cfg["model_name"] == "from-env"
    assert cfg["temperature"] == 0.2
    assert cfg["request_timeout"] == 11.0
    assert cfg["debug"] is True
    assert cfg.tools == ["python"]


def test_values_are_typed_on_load():
    cfg = load_settings({}, environ={"DEBUG": "false", "THINK_DEPTH": "5", "NO_DEFAULT": "true",
                                     "TEMPERATURE": "0.7"})
    assert cfg["debug"] is False and cfg["think_depth"] == 5 and cfg["no_default"] is True
    assert cfg["temperature"] == 0.7


def test_bad_value_names_the_key():
    with pytest.raises(ConfigError) as info:
        load_settings({}, environ={"THINK_DEPTH": "lots"})
    assert info.value.key == "think_depth" and "THINK_DEPTH" in str(info.value)
    with pytest.raises(ConfigError, match="debug"):
        coerce("debug", "maybe")
    with pytest.raises(ConfigError, match="think_depth"):
        coerce("think_depth", -1)


def test_bad_secret_value_is_never_shown():
    with pytest.raises(ConfigError) as info:
        get_typed({"bing_api_key": "sk-very-secret"}, "bing_api_key", 5)
    assert "sk-very-secret" not in str(info.value)


def test_empty_keywords_count_as_unset():
    cfg = load_settings({"model_name": "", "proxy": "", "think_depth": None}, environ={"MODEL_NAME": "env-model"})
    assert cfg["model_name"] == "env-model" and cfg["proxy"] is None and cfg["think_depth"] == 3


def test_openai_api_key_alias_and_table_name_wins():
    assert load_settings({}, environ={"OPENAI_API_KEY": "a"})["llm_api_key"] == "a"
    assert load_settings({}, environ={"OPENAI_API_KEY": "a", "LLM_API_KEY": "b"})["llm_api_key"] == "b"


def test_invalid_config_json_names_the_line(tmp_path):
    write(tmp_path / "config.json", '{\n  "tools": ["python"],\n  "kwargs": {,}\n}')
    with pytest.raises(ConfigError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert "line 3" in str(info.value) and "config.json" in str(info.value)


@pytest.mark.parametrize("content, key", [
    ('["python"]', "config_path"),
    ('{"tools": "python"}', "tools"),
    ('{"kwargs": []}', "kwargs"),
])
def test_config_json_shape_errors(tmp_path, content, key):
    write(tmp_path / "config.json", content)
    with pytest.raises(ConfigError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert info.value.key == key


def test_explicit_config_path_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings({"config_path": str(tmp_path / "missing.json")}, environ={})


def test_tool_settings_from_environment_only_with_known_prefix():
    cfg = load_settings({}, environ={"PYTHON_TIMEOUT": "7", "UNRELATED_SECRET": "x"}, tool_prefixes=["python_"])
    assert cfg["python_timeout"] == "7"
    assert "unrelated_secret" not in cfg.values
    assert get_typed(cfg.values, "python_timeout", 30.0) == 7.0


def test_get_typed_treats_empty_as_default():
    assert get_typed({"x": ""}, "x", 3) == 3
    assert get_typed({"x": "4"}, "x", 3) == 4
    assert get_typed({"x": "no"}, "x", True) is False


def test_secret_keys_are_recognised():
    for key in ("llm_api_key", "bing_subscription_key", "wolfram_alpha_appid", "zaobao_api_key", "hf_token"):
        assert is_secret_key(key), key
    for key in ("model_name", "think_depth", "proxy"):
        assert not is_secret_key(key)


def test_config_json_template_lists_every_setting():
    from pathlib import Path

    from chatgpt_tool_hub.config import SETTINGS

    template = (Path(__file__).resolve().parents[1] / "config.json.template").read_text(encoding="utf-8")
    for key in SETTINGS:
        assert f'"{key}"' in template, key


def test_build_llm_types_raw_chatbot_kwargs(chat_server):
    from chatgpt_tool_hub.llm.build import build_llm

    llm = build_llm({"llm_api_base_url": chat_server.url, "request_timeout": "7", "temperature": "0.5",
                     "model_name": "", "proxy": "", "max_retries": "0", "junk": ""})
    assert llm.model_name == "gpt-4o-mini"
    assert llm.complete([{"role": "user", "content": "hi"}]).text == "OK"
    assert chat_server.bodies[0]["temperature"] == 0.5


def test_build_llm_without_any_llm_setting_says_how_to_configure():
    from chatgpt_tool_hub.llm.build import build_llm

    with pytest.raises(ConfigError, match="No LLM is configured"):
        build_llm({"llm_api_key": "", "deployment_id": ""})


def test_required_keys_and_shared_prefixes_are_read_from_the_environment(monkeypatch):
    from chatgpt_tool_hub.apps.factory import env_prefixes
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    environ = {"BING_SUBSCRIPTION_KEY": "b", "GOOGLE_CSE_ID": "c", "PLUGIN_TIMEOUT": "3", "HOME": "/root"}
    cfg = load_settings({}, environ=environ, tool_prefixes=env_prefixes(main_tool_register))
    assert cfg["bing_subscription_key"] == "b" and cfg["google_cse_id"] == "c" and cfg["plugin_timeout"] == "3"
    assert "home" not in cfg.values


def test_a_list_in_config_json_for_a_text_setting_is_its_comma_separated_form():
    from chatgpt_tool_hub.config import coerce_as

    assert coerce_as("serve_allowed_origins", ["https://a.test", "https://b.test:3000"], str) == \
        "https://a.test, https://b.test:3000"
    assert coerce_as("serve_allowed_hosts", ("hub.test",), str) == "hub.test"
