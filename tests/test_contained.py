"""run_contained: parsers of untrusted bytes in a child that a wall limit, a memory limit or a cancel kills."""

from __future__ import annotations

import os
import sys
import textwrap
import threading
import time

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.run.control import RunBudget
from chatgpt_tool_hub.runtime.contained import Cancellation, ContainedError, run_contained

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the limits and the tree kill are POSIX")

TARGETS = textwrap.dedent('''
    import os
    import time

    class Stranger:
        pass

    def echo(payload):
        return payload

    def spin(payload):
        with open(payload, "w") as fh:
            fh.write(str(os.getpid()))
        while True:
            pass

    def sleep(payload):
        with open(payload, "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(600)

    def hog(payload):
        blocks = []
        while True:
            blocks.append(bytearray(50_000_000))

    def refuse(payload):
        from chatgpt_tool_hub.errors import ToolInputError
        raise ToolInputError("not a document: " + payload)

    def fail(payload):
        raise KeyError(payload)

    def environment(payload):
        return dict(os.environ)

    def stranger(payload):
        return Stranger()
''')


@pytest.fixture
def targets(tmp_path):
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "contained_targets.py").write_text(TARGETS, encoding="utf-8")
    return {"sys_path": [str(folder)]}


def _gone(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` is dead (gone or a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    return True
        except (OSError, IndexError):
            return True
        time.sleep(0.01)
    return False


def _pid_in(path, within: float = 10.0) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.01)
    raise AssertionError("the child never started")


def test_the_result_comes_back_from_a_fresh_child(targets):
    payload = {"bytes": os.urandom(3_000_000), "list": [1, "two", (3.0,)], "set": {4}}
    assert run_contained("contained_targets:echo", payload, wall_s=30, **targets) == payload


def test_a_parser_that_spins_forever_is_killed_at_its_wall_limit(targets, tmp_path):
    pid_file = tmp_path / "pid"
    with pytest.raises(ContainedError, match=r"took longer than 1 s .*raise read_document_timeout") as caught:
        run_contained("contained_targets:spin", str(pid_file), wall_s=1, cpu_s=30,
                      settings={"wall": "read_document_timeout"}, **targets)
    assert caught.value.limit == "wall" and caught.value.setting == "read_document_timeout"
    assert _gone(_pid_in(pid_file))


def test_a_parser_past_its_cpu_limit_is_stopped(targets, tmp_path):
    with pytest.raises(ContainedError, match="CPU time") as caught:
        run_contained("contained_targets:spin", str(tmp_path / "pid"), wall_s=30, cpu_s=1, **targets)
    assert caught.value.limit == "cpu"


def test_a_parser_that_allocates_past_its_memory_is_stopped_with_a_clear_error(targets):
    with pytest.raises(ContainedError, match=r"more than 300 MB of memory .*raise read_document_max_memory_mb") as e:
        run_contained("contained_targets:hog", None, wall_s=30, memory_mb=300,
                      settings={"memory": "read_document_max_memory_mb"}, **targets)
    assert e.value.limit == "memory"


@pytest.mark.parametrize("kind", ["cancellation", "run budget"])
def test_cancel_from_another_thread_kills_the_child(targets, tmp_path, kind):
    cancel = Cancellation() if kind == "cancellation" else RunBudget()
    pid_file = tmp_path / "pid"
    outcome: list[BaseException] = []

    def parse() -> None:
        try:
            run_contained("contained_targets:sleep", str(pid_file), wall_s=120, cancel=cancel, **targets)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=parse)
    worker.start()
    pid = _pid_in(pid_file)
    cancel.cancel()
    worker.join(30)
    assert not worker.is_alive()
    assert isinstance(outcome[0], ContainedError) and outcome[0].limit == "cancelled"
    assert _gone(pid)


def test_work_cancelled_before_it_starts_starts_no_child(targets, tmp_path):
    cancel = Cancellation()
    cancel.cancel()
    with pytest.raises(ContainedError, match="cancelled"):
        run_contained("contained_targets:sleep", str(tmp_path / "pid"), wall_s=60, cancel=cancel, **targets)
    assert not (tmp_path / "pid").exists()


def test_the_packages_errors_come_back_as_they_are_and_others_named(targets):
    with pytest.raises(ToolInputError, match="not a document: x"):
        run_contained("contained_targets:refuse", "x", wall_s=30, **targets)
    with pytest.raises(ToolExecutionError, match=r"parsing 'a.pdf' failed \(KeyError: 'k'\)"):
        run_contained("contained_targets:fail", "k", wall_s=30, what="parsing 'a.pdf'", **targets)


def test_the_child_gets_no_secrets_and_the_parent_builds_only_expected_types(targets, monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-contained-secret")
    seen = run_contained("contained_targets:environment", None, wall_s=30, **targets)
    assert "LLM_API_KEY" not in seen and "sk-contained-secret" not in repr(seen)
    with pytest.raises(ContainedError, match="not expected"):
        run_contained("contained_targets:stranger", None, wall_s=30, **targets)


def test_cancellation_runs_callbacks_once_and_at_once_after_the_fact():
    cancel, calls = Cancellation(), []
    remove = cancel.register(lambda: calls.append("first"))
    cancel.register(lambda: calls.append("second"))
    remove()
    assert cancel.cancel() and not cancel.cancel() and cancel.cancelled and cancel.wait(0)
    cancel.on_cancel(lambda: calls.append("late"))
    assert calls == ["second", "late"]


def test_an_image_handed_in_is_decoded_in_the_child(tmp_path, monkeypatch):
    Image = pytest.importorskip("PIL.Image")
    from chatgpt_tool_hub.runtime.filenames import ingest_audio, ingest_image, ingest_image_sized, write_wav

    source = tmp_path / "photo.png"
    Image.new("RGB", (1024, 256), (200, 10, 10)).save(source)
    monkeypatch.chdir(tmp_path)  # names relative to this process's folder, not the child's
    name, pixels = ingest_image_sized("photo.png", tmp_path / "ws")
    write_wav(tmp_path / "tone.wav", [0.0, 0.5, -0.5], 8000)
    copied = tmp_path / "ws" / ingest_audio("tone.wav", tmp_path / "ws")
    assert copied.read_bytes() == (tmp_path / "tone.wav").read_bytes()
    assert pixels == 1024 * 256 and Image.open(tmp_path / "ws" / name).size == (512, 128)
    cancelled = Cancellation()
    cancelled.cancel()
    with pytest.raises(ContainedError, match="cancelled"):
        ingest_image(source, tmp_path / "ws", cancellation=cancelled)
    assert sorted(p.name for p in (tmp_path / "ws" / "image").iterdir()) == [name.split("/")[1]]


def test_a_decompression_bomb_png_is_refused_before_it_is_decoded(tmp_path):
    pytest.importorskip("PIL")
    from chatgpt_tool_hub.runtime.filenames import ingest_image_sized

    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(bomb_png(6000, 6000))
    assert bomb.stat().st_size < 200_000
    with pytest.raises(ToolInputError, match=r"6000x6000 pixels, more than the 10000000 pixels left of the budget"):
        ingest_image_sized(bomb, tmp_path / "ws", max_pixels=10_000_000, why="of the budget")
    assert not list((tmp_path / "ws" / "image").iterdir())


def bomb_png(width: int, height: int) -> bytes:
    """A valid grey PNG of ``width`` x ``height`` black pixels: a few KB that decode to width * height bytes."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    packer = zlib.compressobj(9)
    row = b"\x00" * (width + 1)
    body = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


if sys.platform != "linux":  # pragma: no cover - /proc is how the tests see a process
    pytestmark = pytest.mark.skip(reason="the tests look at processes through /proc")
