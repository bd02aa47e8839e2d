"""The file tools: ``read-file``, ``write-file``, ``list-dir``, confined to the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.builtin import BUILTIN_TOOLS
from chatgpt_tool_hub.tools.builtin.files import ListDirTool, ReadFileTool, WriteFileTool
from chatgpt_tool_hub.tools.tool_register import main_tool_register

posix_only = pytest.mark.skipif(os.name != "posix", reason="symbolic links, FIFOs and /etc are POSIX")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workspace with a secret in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("TOP SECRET")
    return folder


@pytest.fixture
def read(ws):
    return ReadFileTool.from_config(workspace_dir=str(ws))


@pytest.fixture
def write(ws):
    return WriteFileTool.from_config(workspace_dir=str(ws))


@pytest.fixture
def listing(ws):
    return ListDirTool.from_config(workspace_dir=str(ws))


# ---- happy paths ------------------------------------------------------------------------


def test_workspace_is_created_and_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tool = ReadFileTool.from_config(workspace_dir="")
    assert Path(tool.root) == (tmp_path / "workspace").resolve() and Path(tool.root).is_dir()


def test_write_then_read(write, read, ws):
    assert write.run({"path": "notes.txt", "content": "héllo\n"}) == "Wrote 7 bytes to 'notes.txt' in the workspace."
    assert (ws / "notes.txt").read_text(encoding="utf-8") == "héllo\n"
    assert read.run("notes.txt") == "héllo\n"
    assert read.run({"path": "notes.txt"}) == "héllo\n"
    assert read.run('{"path": "./notes.txt"}') == "héllo\n"


def test_write_creates_parent_folders_and_appends(write, read, ws):
    write.run('{"path": "a/b/c.txt", "content": "one\\n"}')
    assert write.run({"path": "a/b/c.txt", "content": "two\n", "append": True}).startswith("Appended 4 bytes")
    assert read.run("a/b/c.txt") == "one\ntwo\n"
    write.run({"path": "a/b/c.txt", "content": "new"})
    assert read.run("a/b/c.txt") == "new"


def test_absolute_path_inside_the_workspace_is_fine(write, read, ws):
    target = Path(write.root) / "abs.txt"
    write.run({"path": str(target), "content": "x"})
    assert read.run(str(target)) == "x"


def test_windows_separators_inside_the_workspace(write, read):
    write.run({"path": "sub\\file.txt", "content": "x"})
    assert read.run("sub/file.txt") == "x"


def test_list_dir(write, listing, ws):
    write.run({"path": "b.txt", "content": "12345"})
    write.run({"path": "a.txt", "content": ""})
    write.run({"path": "zdir/inner.txt", "content": "x"})
    out = listing.run("")
    lines = out.splitlines()
    assert lines[0] == "the workspace holds 3 entries (type, size in bytes, name):"
    assert lines[1].startswith("dir") and lines[1].endswith("zdir/")
    assert lines[2].split() == ["file", "0", "a.txt"]
    assert lines[3].split() == ["file", "5", "b.txt"]
    assert listing.run(".") == out
    assert listing.run("zdir").splitlines()[1].split() == ["file", "1", "inner.txt"]
    (ws / "empty").mkdir()
    assert listing.run("empty") == "'empty' is empty."


def test_list_dir_is_capped(ws):
    tool = ListDirTool.from_config(workspace_dir=str(ws), list_dir_max_entries="5")
    for i in range(12):
        (ws / f"f{i:02}.txt").write_text("")
    out = tool.run("")
    assert "holds 12 entries" in out and "... and 7 more entries (list_dir_max_entries)" in out
    assert len(out.splitlines()) == 1 + 5 + 1


# ---- refusals ----------------------------------------------------------------------------


TRAVERSALS = ["../x", "a/../../x", "/etc/passwd", "%2e%2e/x", "%2e%2e%2fx", "%252e%252e/x", "%25252e%25252e/x",
              "..\\x", "a\\..\\..\\x", "~/.bashrc", "~root/x", "x\x00.txt", "%00x", "..", "%2fetc%2fpasswd"]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_read_refuses_traversal(read, path):
    with pytest.raises(ToolInputError) as info:
        read.run({"path": path})
    assert "workspace" in str(info.value) or "NUL" in str(info.value)
    assert "TOP SECRET" not in str(info.value)


@pytest.mark.parametrize("path", TRAVERSALS)
def test_write_refuses_traversal(write, path, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ToolInputError):
        write.run({"path": path, "content": "pwned"})
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/etc/passwd").read_text().startswith("pwned") if Path("/etc/passwd").exists() else True


@pytest.mark.parametrize("path", TRAVERSALS)
def test_list_refuses_traversal(listing, path):
    with pytest.raises(ToolInputError):
        listing.run({"path": path})


def test_refusal_says_what_to_do(read):
    with pytest.raises(ToolInputError) as info:
        read.run("/etc/passwd")
    assert "must be relative to the workspace" in str(info.value)


@posix_only
def test_symlink_pointing_outside_is_refused_for_read_write_and_list(read, write, listing, ws, outside):
    os.symlink(outside, ws / "door")
    os.symlink(outside / "secret.txt", ws / "secret-link.txt")
    os.symlink(outside / "new.txt", ws / "dangling.txt")
    for path in ("door/secret.txt", "secret-link.txt"):
        with pytest.raises(ToolInputError, match="symbolic link"):
            read.run(path)
    for path in ("door/new.txt", "secret-link.txt", "dangling.txt", "door/sub/x.txt"):
        with pytest.raises(ToolInputError, match="symbolic link"):
            write.run({"path": path, "content": "pwned"})
    with pytest.raises(ToolInputError, match="symbolic link"):
        listing.run("door")
    assert (outside / "secret.txt").read_text() == "TOP SECRET"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    out = listing.run("")  # the links are listed, not followed
    assert "link" in out and "door" in out and "TOP SECRET" not in out


@posix_only
def test_symlink_inside_the_workspace_is_followed(write, read, ws):
    write.run({"path": "real/data.txt", "content": "inside"})
    os.symlink(ws / "real", ws / "alias")
    os.symlink("real/data.txt", ws / "data-link.txt")
    assert read.run("alias/data.txt") == "inside"
    assert read.run("data-link.txt") == "inside"
    write.run({"path": "data-link.txt", "content": "changed"})
    assert (ws / "real" / "data.txt").read_text() == "changed"


@posix_only
def test_workspace_that_is_itself_a_symlink(tmp_path):
    real = tmp_path / "real-ws"
    real.mkdir()
    os.symlink(real, tmp_path / "ws-link")
    write = WriteFileTool.from_config(workspace_dir=str(tmp_path / "ws-link"))
    read = ReadFileTool.from_config(workspace_dir=str(tmp_path / "ws-link"))
    write.run({"path": "x.txt", "content": "ok"})
    assert read.run("x.txt") == "ok" and (real / "x.txt").read_text() == "ok"


@posix_only
def test_fifo_and_non_regular_files_are_refused(read, write, ws):
    ws.mkdir(exist_ok=True)
    os.mkfifo(ws / "pipe")
    with pytest.raises(ToolInputError, match="not a regular file"):
        read.run("pipe")  # and it did not block on the FIFO
    with pytest.raises(ToolInputError, match="not a regular file"):
        write.run({"path": "pipe", "content": "x"})


@posix_only
def test_write_refuses_a_file_with_other_hard_links(write, ws, tmp_path):
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("a")
    os.link(ws / "a.txt", ws / "b.txt")
    with pytest.raises(ToolInputError, match="hard links"):
        write.run({"path": "b.txt", "content": "x"})


def test_folders_and_files_mixed_up(read, write, listing, ws):
    write.run({"path": "dir/file.txt", "content": "x"})
    with pytest.raises(ToolInputError, match="folder"):
        read.run("dir")
    with pytest.raises(ToolInputError, match="workspace folder"):
        read.run(".")
    with pytest.raises(ToolInputError, match="is a file"):
        listing.run("dir/file.txt")
    with pytest.raises(ToolInputError, match="folder"):
        write.run({"path": "dir", "content": "x"})


def test_missing_things_are_execution_errors(read, listing):
    with pytest.raises(ToolExecutionError, match="no file 'nope.txt'"):
        read.run("nope.txt")
    with pytest.raises(ToolExecutionError, match="no file"):
        read.run("no-dir/nope.txt")
    with pytest.raises(ToolExecutionError, match="no folder 'nope'"):
        listing.run("nope")


@pytest.mark.parametrize("bad", ["", "   ", "plain text, not JSON", '{"path": "x.txt"}', '{"content": "x"}',
                                 '{"path": 5, "content": "x"}'])
def test_write_bad_input(write, bad):
    with pytest.raises(ToolInputError):
        write.run(bad)


def test_read_empty_input(read):
    with pytest.raises(ToolInputError, match="needs a file path"):
        read.run("  ")


# ---- size caps and content ----------------------------------------------------------


def test_read_cap_shows_the_head_and_a_note(ws):
    read = ReadFileTool.from_config(workspace_dir=str(ws), read_file_max_bytes="100")
    (ws / "big.txt").write_text("é" * 200, encoding="utf-8")  # 400 bytes, 2 per character
    out = read.run("big.txt")
    assert out.startswith("é" * 50) and "\ufffd" not in out
    assert "showed the first 100 of 400 bytes (read_file_max_bytes)" in out


def test_write_cap(ws):
    write = WriteFileTool.from_config(workspace_dir=str(ws), write_file_max_bytes="10")
    with pytest.raises(ToolInputError, match="write_file_max_bytes"):
        write.run({"path": "x.txt", "content": "x" * 11})
    assert not (ws / "x.txt").exists()
    assert write.run({"path": "x.txt", "content": "x" * 10}).startswith("Wrote 10 bytes")


def test_binary_and_empty_files(read, ws):
    ws.mkdir(exist_ok=True)
    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (ws / "empty.txt").write_bytes(b"")
    (ws / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert read.run("image.png").startswith("'image.png' is a binary file (")
    assert read.run("empty.txt") == "(the file 'empty.txt' is empty)"
    assert read.run("latin1.txt") == "caf\ufffd"


# ---- configuration and registration ---------------------------------------------------


def test_from_config_ignores_junk_and_checks_values(tmp_path):
    junk = {f"key_{i}": "" for i in range(60)}
    junk.update(read_file_max_bytes="", write_file_max_bytes="", list_dir_max_entries="", model_name="x")
    for cls in (ReadFileTool, WriteFileTool, ListDirTool):
        tool = cls.from_config(workspace_dir=str(tmp_path / "w"), **junk)
        assert Path(tool.root) == (tmp_path / "w").resolve()
    assert ReadFileTool.from_config(workspace_dir=str(tmp_path)).max_bytes == 100_000
    assert WriteFileTool.from_config(workspace_dir=str(tmp_path)).max_bytes == 1_000_000
    assert ListDirTool.from_config(workspace_dir=str(tmp_path)).max_entries == 200
    with pytest.raises(ConfigError) as info:
        ReadFileTool.from_config(workspace_dir=str(tmp_path), read_file_max_bytes="0")
    assert info.value.key == "read_file_max_bytes"


def test_registration_and_flags(tmp_path):
    assert WriteFileTool.dangerous is True
    assert ReadFileTool.dangerous is False and ListDirTool.dangerous is False
    assert BUILTIN_TOOLS["write-file"][3] is False  # never a default tool: it changes files
    assert BUILTIN_TOOLS["read-file"][3] is True and BUILTIN_TOOLS["list-dir"][3] is True
    for name in ("read-file", "write-file", "list-dir"):
        tool = main_tool_register.build(name, workspace_dir=str(tmp_path), unrelated="")
        assert tool.name == name


def test_engine_keeps_serving_after_refusals(ws, outside):
    llm = ScriptedLLM([
        "Action: read-file\nAction Input: ../outside/secret.txt",
        "Action: write-file\nAction Input: just text",
        'Action: write-file\nAction Input: {"path": "/etc/evil", "content": "x"}',
        'Action: write-file\nAction Input: {"path": "ok.txt", "content": "fine"}',
        "Action: list-dir\nAction Input: ",
        "Action: read-file\nAction Input: ok.txt",
        "Thought: Do I need to use a tool? No\nAI: done",
    ])
    app = AppFactory().create_app(tools_list=["read-file", "write-file", "list-dir"], llm=llm, no_default=True,
                                  think_depth=6, workspace_dir=str(ws))
    try:
        result = app.run("go")
    finally:
        app.close()
    assert result.output == "done"
    assert [s.status for s in result.steps] == ["error", "error", "error", "ok", "ok", "ok"]
    assert all("TOP SECRET" not in s.observation for s in result.steps)
    assert "ok.txt" in result.steps[4].observation
    assert result.steps[5].observation == "fine"
