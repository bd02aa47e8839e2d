"""Files a planner request names by path: any file of this machine at the terminal, the user's workspace only
on ``tool-hub serve`` (``planner_request_files``).

Over HTTP a request comes from anyone the server lets in: a path it names -- another user's workspace file, a
file under /tmp or /home -- must not be copied into the asking user's workspace (and then served back by a
signed link or described by a tool). The plan that names it gets a plan problem that names the setting and
reads the same whether or not a file is there; the run answers, it does not fail.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import requests
from test_server_support import Live, live, png_bytes, user_workspace  # noqa: F401 - the fixture

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.planner.inputs import RequestFiles
from chatgpt_tool_hub.server.jarvis import JARVIS_USER
from chatgpt_tool_hub.server.tenancy import app_settings
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.builtin.media import ImageRotateTool

SETTING = 'planner_request_files="workspace"'
REFUSED = "That file cannot be used here."


def rotate_plan(path: str) -> str:
    return json.dumps([{"task": "image-rotate", "id": 0, "dep": [-1], "args": {"image": path, "degrees": 90}}])


def files_in(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) if folder.exists() \
        else []


def two_users(live, replies: list, **settings) -> tuple[Live, ScriptedLLM, Path]:
    """A server with keys ``key-a`` and ``key-b``; ``key-b``'s workspace holds ``image/private.png``. A reply
    ``"plan"`` is the plan that rotates the path ``named[0]`` (set once the workspaces are known)."""
    named: list[str] = []
    llm = ScriptedLLM([(lambda _messages: rotate_plan(named[0])) if r == "plan" else r for r in replies])
    server = live(llm=llm, tools_list=["image-rotate"], serve_api_keys="key-a,key-b", **settings)
    private = user_workspace(server, key="key-b") / "image" / "private.png"
    private.parent.mkdir(parents=True, exist_ok=True)
    private.write_bytes(png_bytes((10, 20, 30)))
    named.append(str(private))
    return server, llm, private


def ask_planner(server: Live, key: str, question: str, **extra) -> str:
    reply = server.client(key).chat.completions.create(
        model="tool-hub-planner", messages=[{"role": "user", "content": question}], **extra)
    return reply.choices[0].message.content


def problem_line(request: list) -> str:
    """The plan problem the re-plan request shows the LLM."""
    text = "\n".join(str(m.get("content")) for m in request)
    return next(line for line in text.splitlines() if SETTING in line)


# ---- over HTTP ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", [None, "local"])
def test_a_user_cannot_have_another_users_workspace_file_copied_into_their_own(live, monkeypatch, env):
    if env:  # the environment (and config.json) cannot turn the server's setting back
        monkeypatch.setenv("PLANNER_REQUEST_FILES", env)
    server, llm, private = two_users(live, ["plan", "plan", REFUSED])
    answer = ask_planner(server, "key-a", f"rotate {private} by 90 degrees",
                         extra_body={"planner_request_files": "local"})  # a request carries no settings
    assert answer == REFUSED
    assert files_in(user_workspace(server, key="key-a")) == []  # nothing copied, nothing made
    assert files_in(private.parent.parent) == ["image/private.png"]
    assert len(llm.requests) == 3  # the plan, the re-plan after the problem, the answer without tools
    assert str(private) in problem_line(llm.requests[1])
    assert SETTING in "\n".join(str(m.get("content")) for m in llm.requests[2])  # the answer knows why


def test_a_file_outside_every_workspace_and_a_missing_one_read_the_same(live, tmp_path):
    outside = tmp_path / "elsewhere" / "holiday.png"
    outside.parent.mkdir()
    outside.write_bytes(png_bytes())
    missing = tmp_path / "elsewhere" / "nothing.png"
    replies = [rotate_plan(str(outside))] * 2 + [REFUSED] + [rotate_plan(str(missing))] * 2 + [REFUSED]
    server, llm, _ = two_users(live, replies)
    assert ask_planner(server, "key-a", f"rotate {outside}") == REFUSED
    assert ask_planner(server, "key-a", f"rotate {missing}") == REFUSED
    assert files_in(user_workspace(server, key="key-a")) == []
    first, second = problem_line(llm.requests[1]), problem_line(llm.requests[4])
    assert first.replace(str(outside), "<path>") == second.replace(str(missing), "<path>")
    assert "no such file" not in first and "workspace" in first


def test_a_file_in_the_users_own_workspace_is_used_where_it_is(live):
    server, llm, private = two_users(live, ["plan", "Rotated."])
    mine = user_workspace(server, key="key-b")
    answer = ask_planner(server, "key-b", f"rotate {private} by 90 degrees")
    assert answer.startswith("Rotated.") and "_rotate_private_private.png" in answer  # with its /files link
    made = [name for name in files_in(mine) if name != "image/private.png"]
    assert len(made) == 1 and made[0].startswith("image/") and "rotate" in made[0]  # the output, no copy
    assert len(llm.requests) == 2


def test_the_jarvis_routes_copy_no_file_of_the_servers_disk(live, tmp_path):
    outside = tmp_path / "examples" / "d.jpg"
    outside.parent.mkdir()
    from PIL import Image

    Image.new("RGB", (6, 4), (255, 0, 0)).save(outside, "JPEG")
    root = tmp_path / "users"
    llm = ScriptedLLM([rotate_plan(str(outside))] * 2 + [REFUSED])
    server = live(llm=llm, tools_list=["image-rotate"], serve_workspace_root=str(root), serve_jarvis_keyless=True)
    body = {"messages": [{"role": "user", "content": f"based on {outside}, please show me a new image"}]}
    reply = requests.post(server.root + "/hugginggpt", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["message"].startswith(REFUSED)
    assert files_in(root / JARVIS_USER.folder) == []
    assert str(outside) in problem_line(llm.requests[1])


def test_the_server_pins_workspace_for_every_users_app():
    assert app_settings({}, 2)["planner_request_files"] == "workspace"


# ---- the setting, below the server ---------------------------------------------------------------------


@pytest.fixture
def rotate(tmp_path) -> ImageRotateTool:
    tool = ImageRotateTool(workspace_dir=tmp_path / "ws")
    (tool.workspace / "image").mkdir(parents=True)
    (tool.workspace / "image" / "own.png").write_bytes(png_bytes())
    return tool


def test_the_library_and_cli_default_is_local_and_copies_the_named_file(rotate, tmp_path):
    outside = tmp_path / "photo.png"
    outside.write_bytes(png_bytes())
    app = AppFactory().create_app("planner", [], llm=ScriptedLLM([]), no_default=True)
    assert app.settings.request_files == "local"
    app.close()
    files = RequestFiles([f"rotate {outside}"])
    name, problem = files.check(str(outside), "image", rotate)
    assert problem is None and name != str(outside) and (rotate.workspace / name).is_file()


def test_workspace_mode_refuses_links_dotdot_and_outside_paths_with_one_message(rotate, tmp_path):
    outside = tmp_path / "photo.png"
    outside.write_bytes(png_bytes())
    os.symlink(outside, rotate.workspace / "image" / "link.png")
    dotdot = str(rotate.workspace / "image" / ".." / ".." / "photo.png")
    written = [str(outside), "image/link.png", dotdot, str(tmp_path / "none.png")]
    files = RequestFiles([" ".join(written)], mode="workspace")
    messages = set()
    for path in written:
        value, problem = files.check(path, "image", rotate)
        assert value == path and problem is not None and SETTING in problem, path
        messages.add(problem.replace(repr(path), "<path>"))
    assert len(messages) == 1  # the same whether a file is there or not
    assert files_in(rotate.workspace) == ["image/link.png", "image/own.png"] and files.copies == {}
    for path in ("image/own.png", str(rotate.workspace / "image" / "own.png")):
        assert files.check(path, "image", rotate) == (path, None)


def test_workspace_mode_confines_a_tool_without_a_workspace_to_the_requests_workspaces(rotate, tmp_path):
    outside = tmp_path / "photo.png"
    outside.write_bytes(png_bytes())
    inside = str(rotate.workspace / "image" / "own.png")
    plain = type("Plain", (), {})()  # a tool that reads paths itself
    files = RequestFiles([f"{outside} {inside}"], mode="workspace", roots=[str(rotate.workspace)])
    assert files.check(inside, "image", plain) == (inside, None)
    _, problem = files.check(str(outside), "image", plain)
    assert problem is not None and SETTING in problem
    _, problem = RequestFiles([inside], mode="workspace").check(inside, "image", plain)
    assert problem is not None  # no workspace known: nothing is read
    os.link(outside, rotate.workspace / "image" / "hard.png")
    _, problem = files.check(str(rotate.workspace / "image" / "hard.png"), "image", plain)
    assert problem is not None


def test_a_workspace_planner_app_answers_a_plan_naming_an_outside_file_without_copying(rotate, tmp_path):
    outside = tmp_path / "photo.png"
    outside.write_bytes(png_bytes())
    plan = rotate_plan(str(outside))
    llm = ScriptedLLM([plan, plan, REFUSED])
    app = AppFactory().create_app("planner", [rotate], llm=llm, no_default=True, planner_request_files="workspace")
    try:
        result = app.run(f"rotate {outside}")
    finally:
        app.close()
    assert result.output == REFUSED and result.stopped_by == "plan_failed"
    assert any(SETTING in problem for problem in result.plan_problems)
    assert files_in(rotate.workspace) == ["image/own.png"]


@pytest.mark.parametrize("value", ["anywhere", "off", 3])
def test_a_bad_mode_is_a_config_error_naming_the_setting(value):
    with pytest.raises(ConfigError) as err:
        AppFactory().create_app("planner", [], llm=ScriptedLLM([]), no_default=True, planner_request_files=value)
    assert "planner_request_files" in str(err.value) and "workspace" in str(err.value)
