"""MCP results with files (saved into the workspace and named), the resource and prompt tools, and tool names
that clash across servers (renamed with a warning, never dropped). Servers: the stdio fixture server."""

from __future__ import annotations

import base64
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("mcp")

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError  # noqa: E402
from chatgpt_tool_hub.tools.plugins.mcp_tools import load_mcp_servers, load_mcp_tools, render_result  # noqa: E402
from chatgpt_tool_hub.tools.plugins.mcp_tools.results import FileSaver  # noqa: E402

SERVER = str(Path(__file__).parent / "fixtures" / "mcp_server.py")
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
PDF = b"%PDF-1.4 fixture\n%%EOF\n"


def _by_name(tools):
    return {t.name: t for t in tools}


def _named_files(text: str, workspace: Path) -> list[Path]:
    """The workspace files an observation names (each once, in order)."""
    import re

    names = re.findall(r"\b(?:image|audio|video|files)/[0-9a-f]{8}\.[a-z0-9]+", text)
    return [workspace / name for name in dict.fromkeys(names)]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return tmp_path_factory.mktemp("workspace")


@pytest.fixture(scope="module")
def tools(workspace):
    loaded = _by_name(load_mcp_tools([sys.executable, SERVER], connect_timeout=20, call_timeout=20,
                                     workspace=workspace))
    yield loaded
    loaded["add"].close()


# ---- files in results -----------------------------------------------------------------------------


def test_images_are_saved_into_the_workspace_and_named(tools, workspace):
    out = tools["gallery"].run({"chars": 3})
    assert out.startswith("AAA\n[image saved as image/")
    files = _named_files(out, workspace)
    assert len(files) == 2 and files[0] != files[1]
    assert all(f.parent == workspace / "image" and f.suffix == ".png" and f.read_bytes() == PNG for f in files)
    assert "(image/png, 70 bytes)" in out


def test_audio_and_binary_resources_are_saved_text_resources_included(tools, workspace):
    audio = tools["audio"].run({})
    [clip] = _named_files(audio, workspace)
    assert clip.parent.name == "audio" and clip.suffix == ".wav" and clip.read_bytes().startswith(b"RIFF")
    pdf = tools["blob"].run({})
    [saved] = _named_files(pdf, workspace)
    assert saved.parent.name == "files" and saved.suffix == ".pdf" and saved.read_bytes() == PDF
    assert "fixture://report.pdf" in pdf                                    # where it came from
    assert tools["doc"].run({}) == "[resource: fixture://notes.txt]\nthe notes"


def test_resource_links_are_named_with_the_tool_that_reads_them(tools):
    assert tools["link"].run({}) == ("[resource link: greeting fixture://greeting (text/plain); "
                                     "read it with fixture-read-resource]")


def test_names_of_saved_files_survive_a_clipped_result(workspace):
    tools = _by_name(load_mcp_tools([sys.executable, SERVER], connect_timeout=20, workspace=workspace,
                                    max_result_chars=300))
    try:
        out = tools["gallery"].run({"chars": 5000})
    finally:
        tools["add"].close()
    files = _named_files(out, workspace)
    assert len(out) <= 300 and "omitted" in out
    assert len(files) == 2 and all(f.is_file() for f in files)


def test_blocks_that_cannot_be_saved_are_described(tmp_path):
    saver = FileSaver(tmp_path, max_bytes=10)
    result = SimpleNamespace(content=[
        SimpleNamespace(type="image", data="not base64!!", mime_type="image/png"),
        SimpleNamespace(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"),
    ])
    out = render_result(result, files=saver)
    assert out == "[image: image/png, not valid base64 data]\n[image: image/png, 70 bytes, not saved: larger than 0 MB]"
    assert not any(tmp_path.iterdir())


def test_a_server_chooses_no_file_name_or_folder(tmp_path):
    blob = SimpleNamespace(uri="file:///../../etc/cron.d/evil.sh", mime_type=None, blob=base64.b64encode(b"x").decode())
    out = render_result(SimpleNamespace(content=[SimpleNamespace(type="resource", resource=blob)]),
                        files=FileSaver(tmp_path))
    [saved] = _named_files(out, tmp_path)
    assert saved.parent == tmp_path / "files" and saved.suffix == ".sh" and saved.name != "evil.sh"
    assert saved.read_bytes() == b"x"


def test_in_an_app_files_go_to_the_app_workspace(tmp_path):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    app = AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, workspace_dir=str(tmp_path),
                                  mcp_servers=[[sys.executable, SERVER]])
    try:
        out = next(t for t in app.tools if t.name == "image").run("")
    finally:
        app.close()
    [saved] = _named_files(out, tmp_path)
    assert saved.read_bytes() == PNG                                        # before: "[image: image/png, 70 bytes]"


# ---- resources and prompts --------------------------------------------------------------------------


def test_resources_are_read_through_a_tool_that_lists_them(tools, workspace):
    reader = tools["fixture-read-resource"]
    assert "fixture://greeting (greeting, text/plain): A friendly greeting." in reader.description
    assert "fixture://logo.png" in reader.description and "fixture://items/{item_id}" in reader.description
    assert reader.dangerous is False                                       # reading changes nothing
    assert reader.run("fixture://greeting") == "[resource: fixture://greeting]\nhello from the fixture"
    assert reader.run({"uri": "fixture://items/7"}) == "[resource: fixture://items/7]\nitem 7"
    [logo] = _named_files(reader.run({"uri": "fixture://logo.png"}), workspace)
    assert logo.read_bytes() == PNG and logo.parent.name == "image"
    with pytest.raises(ToolExecutionError, match="refused the resource fixture://nope"):
        reader.run("fixture://nope")


def test_prompts_are_got_through_a_tool_that_lists_them(tools):
    prompts = tools["fixture-get-prompt"]
    assert "review(code, style?): Ask for a review of some code." in prompts.description
    assert prompts.parameters["properties"]["name"]["enum"] == ["review"]
    out = prompts.run({"name": "review", "arguments": {"code": "x = 1", "style": "strict"}})
    assert out == "Ask for a review of some code.\n[user] Please review this code (strict):\nx = 1"
    with pytest.raises(ToolExecutionError, match="code"):
        prompts.run({"name": "review"})                                    # a required argument is missing


def test_every_schema_is_valid_2020_12(tools):
    from jsonschema import Draft202012Validator

    for tool in tools.values():
        Draft202012Validator.check_schema(tool.parameter_schema.schema)


def test_resources_and_prompts_can_be_turned_off_and_need_the_server_to_offer_them(monkeypatch):
    plain = _by_name(load_mcp_tools([sys.executable, SERVER], connect_timeout=20, resources=False, prompts="false",
                                    dangerous=True))
    try:
        assert not any(name.endswith(("read-resource", "get-prompt")) for name in plain)
    finally:
        plain["add"].close()
    bare = _by_name(load_mcp_tools([sys.executable, SERVER], env={"FIXTURE_BARE": "1"}, connect_timeout=20))
    try:
        assert "add" in bare and not any(name.endswith(("read-resource", "get-prompt")) for name in bare)
    finally:
        bare["add"].close()
    with pytest.raises(ConfigError, match="'resources' must be true or false"):
        load_mcp_tools([sys.executable, SERVER], resources="maybe")


def test_the_dangerous_option_covers_the_resource_and_prompt_tools():
    listed = _by_name(load_mcp_tools([sys.executable, SERVER], connect_timeout=20,
                                     dangerous=["fixture-get-prompt", "read-resource"]))
    try:
        assert {name for name, t in listed.items() if t.dangerous} == {"fixture-get-prompt", "fixture-read-resource"}
    finally:
        listed["add"].close()


# ---- names across servers ---------------------------------------------------------------------------


def test_clashing_names_across_servers_are_prefixed_with_a_warning(caplog):
    entries = [[sys.executable, SERVER],
               {"server": {"command": [sys.executable, SERVER], "env": {"FIXTURE_NAME": "other"}}},
               {"server": [sys.executable, SERVER], "prefix": "third"}]
    with caplog.at_level(logging.WARNING, logger="chatgpt_tool_hub.tools.mcp"):
        tools = _by_name(load_mcp_servers(entries, {}, taken={"echo": "the built-in tool 'echo'"}))
    try:
        assert tools["add"].connection is not tools["other-add"].connection is not tools["third-add"].connection
        assert tools["other-add"].run({"a": 1, "b": 2}) == "3"             # before: dropped without a word
        assert tools["fixture-echo"].remote_name == "echo"                 # the app's own tool keeps its name
        assert {"fixture-read-resource", "other-read-resource", "third-read-resource"} <= set(tools)
        warnings = [r.getMessage() for r in caplog.records if "already taken" in r.getMessage()]
        clash = next(w for w in warnings if w.startswith("MCP server 'other'") and "MCP server 'fixture'" in w)
        assert "15 tool names" in clash and "'add' -> 'other-add'" in clash and "and 3 more" in clash  # both servers
        assert any("built-in tool 'echo'" in w and "'echo' -> 'fixture-echo'" in w for w in warnings)
        assert len(warnings) == 5          # one per server and owner it clashed with, not one per tool
        assert len({t.name for t in tools.values()}) == len(tools)
    finally:
        for name in ("add", "other-add", "third-add"):
            tools[name].close()


def test_in_an_app_mcp_tools_never_shadow_the_apps_tools(caplog):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM
    from chatgpt_tool_hub.tools import tool

    @tool(name="add", description="the app's own add")
    def own_add(a: int, b: int) -> int:
        return a - b

    with caplog.at_level(logging.WARNING, logger="chatgpt_tool_hub.tools.mcp"):
        app = AppFactory().create_app(tools_list=[own_add], llm=ScriptedLLM([]), no_default=True,
                                      mcp_servers=[[sys.executable, SERVER]])
    try:
        names = {t.name: t for t in app.tools}
        assert names["add"] is own_add
        assert names["fixture-add"].run({"a": 2, "b": 2}) == "4"
        assert any("already taken by the app, renamed: 'add' -> 'fixture-add'" in r.getMessage()
                   for r in caplog.records)
    finally:
        app.close()


def test_unknown_entry_options_are_config_errors():
    with pytest.raises(ConfigError, match="unknown options: retries"):
        load_mcp_servers([{"server": [sys.executable, SERVER], "retries": 3}], {})
