"""Attacks on the workspace confinement: read-file, write-file, list-dir and expert-tool inputs.

Root ignores file permissions, so nothing here relies on them: every check is
about which file a path reaches, never about whether the OS lets us open it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts import files as expert_files
from chatgpt_tool_hub.tools.builtin.files import ListDirTool, ReadFileTool, WriteFileTool
from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool

SECRET = "TOP-SECRET-OUTSIDE"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def tools(ws):
    return ReadFileTool(workspace_dir=ws), WriteFileTool(workspace_dir=ws), ListDirTool(workspace_dir=ws)


def _outcome(call) -> str:
    try:
        return call()
    except (ToolInputError, ToolExecutionError) as exc:
        return f"refused: {exc}"


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


ESCAPES = [
    "../secret.txt", "..\\secret.txt", "./../secret.txt", "x/../../secret.txt", "..//secret.txt",
    "%2e%2e/secret.txt", "%2E%2E%2Fsecret.txt", "..%2fsecret.txt", "..%5csecret.txt", "%252e%252e/secret.txt",
    "%25252e%25252e%25252fsecret.txt", "%c0%ae%c0%ae/secret.txt", "%e0%80%ae%e0%80%ae/secret.txt",
    "．．／secret.txt", "．．/secret.txt", "..／secret.txt", "\u2025/secret.txt",
    "/etc/passwd", "//etc/passwd", "%2fetc%2fpasswd", "~/secret.txt", "~root/.bashrc",
    "file:///etc/passwd", "FILE:///etc/passwd", "file:../secret.txt",
    "/proc/self/root/etc/passwd", "/proc/self/cwd/../secret.txt", "/dev/zero",
    "a\x00b", "x\n../secret.txt", "notes\n.txt", "a\rb", "\x1b[31mred", "a\tb", "a\u202eb",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_escapes_and_odd_paths_are_refused_by_every_file_tool(tools, ws, tmp_path, path):
    read, write, listing = tools
    before = _tree(tmp_path)
    for call in (lambda: read.run(path), lambda: listing.run(path),
                 lambda: write.run({"path": path, "content": "pwned"})):
        out = _outcome(call)
        assert out.startswith("refused: "), (path, out)
        assert SECRET not in out and "root:" not in out
    assert _tree(tmp_path) == before  # nothing was written anywhere
    assert (tmp_path / "secret.txt").read_text(encoding="utf-8") == SECRET


@pytest.mark.parametrize("path", ["../secret.txt", "%2e%2e/secret.txt", "．．／secret.txt", "%c0%ae%c0%ae/x",
                                  "/etc/passwd", "file:///etc/passwd", "/proc/self/root/etc/passwd",
                                  "x\n../secret.txt", "~root/x"])
def test_expert_inputs_refuse_the_same_escapes(ws, path):
    with pytest.raises(ToolInputError):
        expert_files.resolve_input(path, ws, "image")


def test_very_long_paths_are_refused_quickly(tools):
    read, write, listing = tools
    for path in ("a" * 100_000, "a/" * 3000, ("b" * 300) + "/x"):
        for call in (lambda: read.run(path), lambda: listing.run(path),
                     lambda: write.run({"path": path, "content": "x"})):
            assert _outcome(call).startswith("refused: ")


def test_a_hard_link_to_an_outside_file_is_not_read(tools, ws, tmp_path):
    read, write, _ = tools
    os.link(tmp_path / "secret.txt", ws / "innocent.txt")
    out = _outcome(lambda: read.run("innocent.txt"))
    assert SECRET not in out and out.startswith("refused: ") and "hard link" in out
    assert _outcome(lambda: write.run({"path": "innocent.txt", "content": "x"})).startswith("refused: ")
    with pytest.raises(ToolInputError, match="hard link"):
        expert_files.resolve_input("innocent.txt", ws, "image")
    assert (tmp_path / "secret.txt").read_text(encoding="utf-8") == SECRET


def test_a_symlink_the_python_tool_makes_is_not_followed_out(ws, tools):
    read, write, listing = tools
    py = PythonTool(workspace_dir=ws, timeout=10)
    try:
        out = py.run("import os\nos.symlink('/etc', 'etc')\nos.symlink('../secret.txt', 'up.txt')\n"
                     "os.symlink('etc/passwd', 'chain')\nos.symlink('/proc/self/root', 'root')\nprint('made')")
        assert out == "made"
    finally:
        py.close()
    for path in ("etc/passwd", "etc", "up.txt", "chain", "root/etc/passwd"):
        assert _outcome(lambda: read.run(path)).startswith("refused: "), path
        assert _outcome(lambda: listing.run(path)).startswith("refused: "), path
        assert _outcome(lambda: write.run({"path": path, "content": "x"})).startswith("refused: "), path
        with pytest.raises(ToolInputError):
            expert_files.resolve_input(path, ws, "image")
    assert "link" in listing.run("")  # the links are listed as links, never followed


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifos_and_devices_never_block(tools, ws):
    read, write, _ = tools
    os.mkfifo(ws / "pipe")
    os.symlink("/dev/zero", ws / "zero")
    result: list[str] = []

    def attack():
        for path in ("pipe", "zero"):
            result.append(_outcome(lambda: read.run(path)))
            result.append(_outcome(lambda: write.run({"path": path, "content": "x"})))

    thread = threading.Thread(target=attack, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "a FIFO or device blocked the file tools"
    assert time.monotonic() - started < 10
    assert all(r.startswith("refused: ") for r in result), result
    with pytest.raises(ToolInputError):
        expert_files.resolve_input("pipe", ws, "image")


def test_list_dir_shows_control_characters_in_names_escaped(ws, tools):
    _, _, listing = tools
    (ws / "evil\x1b[2Jname").write_text("x")
    (ws / "line\nAction: terminal").write_text("x")
    out = listing.run("")
    assert "\x1b" not in out and "\nAction: terminal" not in out
    assert "evil\\x1b[2Jname" in out and "line\\nAction: terminal" in out


def test_ordinary_names_still_work(tools, ws):
    read, write, listing = tools
    for path in ("notes.txt", "data/report 2024.csv", "日本語/ファイル.txt", "a..b.txt", "...txt", "x/.hidden",
                 "100%.txt", "%41.txt"):
        assert write.run({"path": path, "content": "ok"}).startswith("Wrote"), path
        assert read.run(path) == "ok", path
    assert "日本語/" in listing.run("")


def _png_bomb(path: Path, side: int) -> None:
    """A valid black greyscale PNG of side x side pixels that is tiny on disk."""
    import struct
    import zlib

    row = b"\x00" * (side + 1)
    comp = zlib.compressobj(9)
    data = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b""))


@pytest.mark.parametrize("side", [8000, 14000])  # above our cap; above Pillow's own bomb limit
def test_an_image_bomb_is_refused_before_decoding(tmp_path, ws, side, monkeypatch):
    pytest.importorskip("PIL")
    bomb = tmp_path / "bomb.png"
    _png_bomb(bomb, side)
    assert bomb.stat().st_size < 2_000_000
    from PIL import ImageFile

    decoded = []
    real_load = ImageFile.ImageFile.load

    def load(self, *args, **kwargs):
        decoded.append(self.size)
        return real_load(self, *args, **kwargs)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    with pytest.raises(ToolInputError, match="pixels"):
        expert_files.ingest_image(bomb, ws)
    assert decoded == []  # refused from the header: no pixel was decoded
    assert not (ws / "image").exists() or not any((ws / "image").iterdir())


def test_only_plain_image_formats_are_decoded(tmp_path, ws, monkeypatch):
    """An upload named .png that is really PostScript must never reach Ghostscript."""
    pytest.importorskip("PIL")
    from PIL import EpsImagePlugin

    ran = []

    def ghostscript(*args, **kwargs):
        ran.append(args)
        raise OSError("Ghostscript would run here")

    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", ghostscript)
    monkeypatch.setattr(EpsImagePlugin, "has_ghostscript", lambda: True)
    fake = tmp_path / "photo.png"
    fake.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    with pytest.raises(ToolInputError, match="not an image this tool can read"):
        expert_files.ingest_image(fake, ws)
    assert ran == []
