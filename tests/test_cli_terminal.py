"""The LLM-OS terminal's commands: /add, /del, /timeout, /save, /undo, /copy and /voice, next to the others."""

from __future__ import annotations

import json
import os
import re
import wave
from pathlib import Path

import pytest

from chatgpt_tool_hub import cli
from chatgpt_tool_hub.console.terminal import HELP, speech_parts
from chatgpt_tool_hub.tools import tool

from helpers import act, answer


@pytest.fixture
def server_env(chat_server, monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_API_BASE_URL", chat_server.url)
    monkeypatch.setenv("MAX_RETRIES", "0")
    monkeypatch.setenv("PYTHON_TIMEOUT", "10")
    monkeypatch.setenv("WORKSPACE_DIR", str(tmp_path / "ws"))
    monkeypatch.setattr(cli, "HISTORY_FILE", str(tmp_path / "history"))
    return chat_server


def terminal(monkeypatch, capsys, *lines: str, argv: tuple[str, ...] = ()) -> str:
    """Run ``tool-hub`` (the terminal) on ``lines`` and return what it printed."""
    feed = iter([*lines, "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(feed))
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def user_messages(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"][1:]]


def test_help_lists_the_0_5_commands_next_to_the_others(server_env, monkeypatch, capsys):
    out = terminal(monkeypatch, capsys, "/help")
    for command in ("/add TOOL", "/del TOOL", "/timeout", "/save [FILE]", "/undo", "/copy", "/voice PATH",
                    "/tools", "/reset", "/depth N", "/model NAME", "/image PATH"):
        assert command in HELP and command in out, command


def test_add_and_del_change_the_tools_the_model_sees(server_env, monkeypatch, capsys):
    server_env.replies = [answer("one"), answer("two"), answer("three")]
    out = terminal(monkeypatch, capsys, "/add terminal", "/add terminal", "/add termnal", "first",
                   "/del url-get", "/del nope", "second", "/add", "/tools", "third", argv=("--tools", "python"))
    assert "added terminal (it asks before each call)" in out
    assert "terminal is already a tool of this session" in out
    assert "unknown tool 'termnal'; did you mean 'terminal'" in out
    assert "removed url-get" in out and "no tool named 'nope'" in out and "usage: /add TOOL" in out
    first, second = (b["messages"][0]["content"] for b in server_env.bodies[:2])
    assert "terminal" in first and "url-get" in first
    assert "terminal" in second and "url-get" not in second
    assert re.search(r"│ terminal +│.*│ yes +│", out)  # /tools: the dangerous tool asks first


def test_add_builds_with_the_sessions_settings_and_names_a_missing_key(server_env, monkeypatch, capsys):
    out = terminal(monkeypatch, capsys, "/add bing-search")
    assert "cannot add bing-search" in out and "bing_subscription_key" in out


def test_timeout_rebuilds_python_and_terminal(server_env, monkeypatch, capsys):
    server_env.replies = [act("python", "import time\ntime.sleep(4)\nprint('woke')"), answer("it was stopped")]
    out = terminal(monkeypatch, capsys, "/timeout", "/timeout x", "/timeout 0", "/timeout 1", "/timeout",
                   "/add terminal", "/timeout", "sleep please")
    assert "python stops after 10 s; /timeout N changes it" in out
    assert out.count("usage: /timeout N") == 2
    assert "python now stops after 1 s (python's variables start afresh)" in out
    assert "python stops after 1 s; terminal stops after 1 s" in out  # /add terminal took the session's setting
    observation = server_env.bodies[1]["messages"][-1]["content"]
    assert "longer than 1 s" in observation and "woke" not in observation


def test_rebuilt_and_added_tools_make_the_workspace_on_first_use(server_env, monkeypatch, capsys, tmp_path):
    out = terminal(monkeypatch, capsys, "/timeout 3", "/add terminal", "/add write-file")
    assert "added write-file" in out
    assert not (tmp_path / "ws").exists()


def test_timeout_without_python_or_terminal(server_env, monkeypatch, capsys):
    monkeypatch.setenv("NO_DEFAULT", "true")
    out = terminal(monkeypatch, capsys, "/timeout")
    assert "no python or terminal tool in this session" in out


def test_undo_forgets_the_last_turn(server_env, monkeypatch, capsys, tmp_path):
    from PIL import Image

    picture = tmp_path / "p.png"
    Image.new("RGB", (8, 8)).save(picture)
    server_env.replies = [answer("hi!"), answer("two"), answer("three")]
    out = terminal(monkeypatch, capsys, "/undo", "hello", "second question", "/undo", f"/image {picture}", "/undo",
                   "third")
    assert "nothing to undo" in out
    assert 'forgot "second question" and its answer' in out and "forgot the file image/" in out
    assert user_messages(server_env.bodies[2]) == ["hello", "hi!", "third"]


def test_save_writes_markdown_or_json(server_env, monkeypatch, capsys, tmp_path):
    server_env.replies = [answer("It is **42**."), answer("And 43.")]
    out = terminal(monkeypatch, capsys, "/save", "what is 6*7?", "and plus one?", "/save chat.json",
                   "/save notes/chat.md", "/save")
    assert "nothing to save yet" in out
    assert f"saved 2 turns to {tmp_path / 'chat.json'} (JSON" in out
    assert f"saved 2 turns to {tmp_path / 'notes' / 'chat.md'} (Markdown)" in out
    assert json.loads((tmp_path / "chat.json").read_text(encoding="utf-8")) == [
        {"role": "user", "content": "what is 6*7?"}, {"role": "assistant", "content": "It is **42**."},
        {"role": "user", "content": "and plus one?"}, {"role": "assistant", "content": "And 43."}]
    markdown = (tmp_path / "notes" / "chat.md").read_text(encoding="utf-8")
    assert markdown.startswith("# tool-hub conversation")
    assert "## you\n\nwhat is 6*7?\n\n## AI\n\nIt is **42**.\n" in markdown and "model gpt-4o-mini" in markdown
    assert len(list(tmp_path.glob("conversation-*.md"))) == 1  # /save without a name


def _fake_clipboard(folder: Path, name: str, status: int = 0) -> Path:
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\n/bin/cat > \"$CLIP_OUT\"\nexit {status}\n", encoding="utf-8")
    script.chmod(0o755)
    return folder


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for the clipboard tool")
def test_copy_uses_the_os_clipboard_tool(server_env, monkeypatch, capsys, tmp_path):
    bin_dir = _fake_clipboard(tmp_path / "bin", "xclip")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("CLIP_OUT", str(tmp_path / "clipboard.txt"))
    server_env.replies = [answer("Paste me: ünïcode")]
    out = terminal(monkeypatch, capsys, "/copy", "say something", "/copy")
    assert "no answer to copy yet" in out
    assert "copied the last answer (17 characters) with xclip" in out
    assert (tmp_path / "clipboard.txt").read_text(encoding="utf-8") == "Paste me: ünïcode"


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for the clipboard tool")
def test_copy_without_a_clipboard_tool_says_what_to_do(server_env, monkeypatch, capsys, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    server_env.replies = [answer("text"), answer("more")]
    out = terminal(monkeypatch, capsys, "say something", "/copy")
    assert "cannot copy: no clipboard tool found on PATH" in out and "/save FILE" in out
    failing = _fake_clipboard(tmp_path / "bad-bin", "wl-copy", status=1)
    monkeypatch.setenv("PATH", str(failing))
    monkeypatch.setenv("CLIP_OUT", str(tmp_path / "ignored.txt"))
    out = terminal(monkeypatch, capsys, "say more", "/copy")
    assert "the clipboard tools found (wl-copy) failed" in out


# ---- /voice ------------------------------------------------------------------------------------------------


def _wav(path: Path, seconds: float = 0.5, rate: int = 16000) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\x00\x10" * int(seconds * rate))
    return path


def test_voice_without_the_tools_says_how_to_add_them(server_env, monkeypatch, capsys, tmp_path):
    out = terminal(monkeypatch, capsys, f"/voice {_wav(tmp_path / 'q.wav')}", "/voice")
    assert "/voice needs the speech-recognition and text-to-speech tools" in out
    assert "--tools speech-recognition,text-to-speech" in out and "/add speech-recognition" in out
    assert "usage: /voice PATH" in out
    assert server_env.bodies == []


def test_voice_with_stt_and_tts_tools(server_env, monkeypatch, capsys, tmp_path):
    workspace = tmp_path / "ws"
    heard: list[str] = []

    @tool(name="stt", description="Transcribe a WAV file.")
    def stt(audio: str) -> str:
        heard.append(audio)
        return "what is two plus two"

    @tool(name="tts", description="Speak a text into a WAV file.")
    def tts(text: str) -> str:
        name = f"audio/spoken-{len(list(workspace.glob('audio/spoken-*')))}.wav"
        _wav(workspace / name, 0.1)
        return name

    real = cli._create_app

    def with_voice(args, console, **extra):
        app = real(args, console, **extra)
        app.add_tool(stt)
        app.add_tool(tts)
        return app

    monkeypatch.setattr(cli, "_create_app", with_voice)
    server_env.replies = [answer("Two plus two is **four**.")]
    out = terminal(monkeypatch, capsys, f"/voice {_wav(tmp_path / 'question.wav')}", "/voice nothing.mp3",
                   "/save talk.md")
    assert re.fullmatch(r"audio/[0-9a-f]{8}\.wav", heard[0]) and (workspace / heard[0]).is_file()
    assert "you (voice)> what is two plus two" in out
    assert server_env.bodies[0]["messages"][-1]["content"] == "what is two plus two"
    assert f"spoken answer: {workspace / 'audio' / 'spoken-0.wav'}" in out
    assert "/voice takes a WAV file; nothing.mp3 is not one" in out
    saved = (tmp_path / "talk.md").read_text(encoding="utf-8")
    assert f"## you (voice, `{heard[0]}`)" in saved and "(spoken into `audio/spoken-0.wav`)" in saved


def test_voice_with_tiny_expert_models(server_env, monkeypatch, capsys, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from chatgpt_tool_hub.experts.tiny import BUILDERS

    monkeypatch.setenv("SPEECH_RECOGNITION_MODEL", BUILDERS["speech-recognition"](tmp_path / "stt"))
    monkeypatch.setenv("SPEECH_RECOGNITION_MAX_NEW_TOKENS", "8")
    monkeypatch.setenv("TEXT_TO_SPEECH_MODEL", BUILDERS["text-to-speech"](tmp_path / "tts"))
    monkeypatch.setenv("EXPERT_DEVICE", "cpu")
    server_env.replies = [answer("Hello to you too.")]
    out = terminal(monkeypatch, capsys, f"/voice {_wav(tmp_path / 'question.wav', 1.0)}",
                   argv=("--tools", "speech-recognition,text-to-speech"))
    said = re.search(r"you \(voice\)> (.+)", out)
    assert said, out
    assert server_env.bodies[0]["messages"][-1]["content"] == said.group(1).strip()
    spoken = re.search(r"spoken answer: (\S+\.wav)", out)
    assert spoken, out
    with wave.open(spoken.group(1), "rb") as wav:
        assert wav.getnframes() > 0 and Path(spoken.group(1)).parent == tmp_path / "ws" / "audio"


def test_speech_parts_cut_at_sentences_then_words():
    assert speech_parts("**Hello** _there_. `code` # here", 0) == ["Hello there. code here"]
    assert speech_parts("One. Two two. Three three three.", 14) == ["One. Two two.", "Three three", "three."]
    parts = speech_parts("word " * 50, 20)
    assert all(len(p) <= 20 for p in parts) and " ".join(parts) == " ".join(["word"] * 50)
    assert speech_parts("  ** ", 10) == []


def test_the_terminal_starts_without_torch_even_with_expert_tools(chat_server, tmp_path):
    """torch is imported when an expert tool is first called, not when tool-hub starts or lists its tools."""
    import subprocess
    import sys

    code = (
        "import builtins, sys\n"
        "lines = iter(['/tools', '/add image-captioning', '/exit'])\n"
        "builtins.input = lambda prompt='': next(lines)\n"
        "from chatgpt_tool_hub import cli\n"
        "status = cli.main(['--tools', 'speech-recognition,text-to-speech'])\n"
        "print('status', status, 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root), "LLM_API_BASE_URL": chat_server.url,
                               "COLUMNS": "200"})
    assert proc.stdout.strip().endswith("status 0 False False"), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "added image-captioning" in proc.stdout and chat_server.bodies == []


def test_schedule_in_the_terminal_makes_lists_and_removes(server_env, monkeypatch, capsys):
    assert "/schedule WHEN QUESTION" in HELP
    out = terminal(monkeypatch, capsys, "/schedule every 10m what time is it?", "/schedule")
    made = re.findall(r"^([0-9a-f]{8}): every 10 minutes, session 'default': what time is it\?", out, re.M)
    assert made, out
    # a new terminal on the same workspace still has it (kept in SQLite), and removes it
    out = terminal(monkeypatch, capsys, "/schedule", f"/schedule remove {made[0]}", "/schedule")
    assert f"{made[0]}: every 10 minutes" in out
    listing = out.rstrip().splitlines()[-1]
    assert made[0] not in listing and "schedule" in listing.lower(), listing


def test_ctrl_c_cancels_the_run_and_the_terminal_goes_on(server_env, monkeypatch, capsys, tmp_path):
    """Ctrl-C while a question runs: the run is cancelled (the python call in flight is killed), the
    question is forgotten, and the next question is asked with a clean history."""
    import signal
    import threading
    import time

    code = "open('started', 'w').write('1')\nimport time\ntime.sleep(60)"
    server_env.replies = [act("python", code), answer("two")]
    started = tmp_path / "ws" / "started"

    def interrupt():
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    out = terminal(monkeypatch, capsys, "first question", "second question", argv=("--tools", "python"))
    assert started.exists()
    assert "cancelling" in out and "cancelled" in out
    assert "two" in out
    assert len(server_env.bodies) == 2  # no LLM call after the cancel
    assert user_messages(server_env.bodies[1]) == ["second question"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the terminal's handler is gone


def test_a_second_ctrl_c_interrupts_at_once():
    import signal

    from chatgpt_tool_hub.console.terminal import cancel_on_interrupt

    class App:
        cancels = 0

        def cancel(self):
            App.cancels += 1

    notices = []
    with pytest.raises(KeyboardInterrupt):
        with cancel_on_interrupt(App(), lambda: notices.append("n")):
            signal.raise_signal(signal.SIGINT)
            assert notices == ["n"]  # the first one only cancels
            signal.raise_signal(signal.SIGINT)
    assert notices == ["n"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
