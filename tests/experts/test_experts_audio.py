"""Speech recognition (tiny Whisper and wav2vec2-CTC) and text-to-speech (tiny VITS), local and remote."""

from __future__ import annotations

import json
import re
import threading
import wave

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.audio import SpeechRecognitionTool, TextToSpeechTool, resample, wav_seconds
from chatgpt_tool_hub.experts.tiny import CHARS
from chatgpt_tool_hub.runtime.models.manager import ModelManager

from expert_helpers import wav_bytes

np = pytest.importorskip("numpy")
pytest.importorskip("torch")
pytest.importorskip("transformers")

TRANSCRIPT = re.compile(r'Transcript of (audio/[0-9a-f]{8}\.wav) \(1\.5 s\): "(.+)"|No speech was recognised in '
                        r'(audio/[0-9a-f]{8}\.wav) \(1\.5 s\)\.', re.S)


def test_whisper_transcribes_a_wav_file(whisper_dir, audio_file):
    tool = SpeechRecognitionTool.from_config(speech_recognition_model=whisper_dir, expert_device="cpu",
                                             speech_recognition_max_new_tokens=6)
    observation = tool.run(audio_file)
    match = TRANSCRIPT.fullmatch(observation)
    assert match and audio_file in (match.group(1), match.group(3)), observation
    pipe = tool.load()
    assert pipe.type == "seq2seq_whisper" and tool.model_key[1] == "automatic-speech-recognition"


def test_wav2vec2_ctc_and_long_audio_in_chunks(wav2vec2_dir, audio_file):
    tool = SpeechRecognitionTool(model=wav2vec2_dir, device="cpu", manager=ModelManager())
    match = TRANSCRIPT.fullmatch(tool.run({"audio": audio_file}))
    assert match
    if match.group(2):
        assert set(match.group(2)) <= set(CHARS)
    chunked = SpeechRecognitionTool(model=wav2vec2_dir, device="cpu", manager=tool.manager,
                                    options={"chunk_length_s": 0.5})  # 1.5 s of audio: three windows
    assert TRANSCRIPT.fullmatch(chunked.run(audio_file))
    assert tool.manager.stats()["loads"] == 1  # same model, same manager


def test_resample():
    tone = np.sin(np.linspace(0, 100, 22050)).astype(np.float32)
    out = resample(tone, 22050, 16000)
    assert out.dtype == np.float32 and len(out) == 16000
    assert resample(tone, 16000, 16000) is not None and len(resample(tone, 16000, 16000)) == 22050


def test_bad_audio_inputs(whisper_dir, workspace):
    tool = SpeechRecognitionTool(model=whisper_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="file 'audio/ghost.wav' does not exist; use a file name"):
        tool.run("audio/ghost.wav")
    (workspace / "audio").mkdir(exist_ok=True)
    (workspace / "audio" / "song.mp3").write_bytes(b"ID3\x03\x00fake mp3")
    with pytest.raises(ToolInputError, match="'song.mp3' is not a WAV file .*convert it to 16-bit PCM WAV"):
        tool.run("audio/song.mp3")
    (workspace / "audio" / "empty.wav").write_bytes(wav_bytes(0))
    with pytest.raises(ToolInputError, match="'empty.wav' holds no audio samples"):
        tool.run("audio/empty.wav")


def test_speech_recognition_remote(fake_endpoint, audio_file, workspace):
    fake_endpoint.reply_json({"text": " turn left at the corner "})
    fake_endpoint.reply_json({"text": ""})
    tool = SpeechRecognitionTool.from_config(speech_recognition_endpoint=fake_endpoint.url)
    assert tool.run(audio_file) == f'Transcript of {audio_file} (1.5 s): "turn left at the corner"'
    request = fake_endpoint.requests[0]
    assert request["headers"]["content-type"] == "audio/wav"
    assert request["body"] == (workspace / audio_file).read_bytes()
    assert tool.run(audio_file) == f"No speech was recognised in {audio_file} (1.5 s)."


TTS = re.compile(r"Spoke the text into (audio/[0-9a-f]{8}\.(wav|flac)) \((\d+\.\d) s, (\d+) Hz\)\.")


def test_text_to_speech_writes_a_wav_file(vits_dir, workspace):
    tool = TextToSpeechTool.from_config(text_to_speech_model=vits_dir, expert_device="cuda:0")
    assert tool.dtype == "float32"  # half_precision = False: VITS stays in float32 even on a GPU
    tool = TextToSpeechTool.from_config(text_to_speech_model=vits_dir, expert_device="cpu")
    match = TTS.fullmatch(tool.run("hello world"))
    assert match and match.group(4) == "16000"
    with wave.open(str(workspace / match.group(1)), "rb") as wav:
        assert wav.getframerate() == 16000 and wav.getnchannels() == 1 and wav.getsampwidth() == 2
        assert wav.getnframes() > 0
    assert float(match.group(3)) == pytest.approx(wav_seconds(workspace / match.group(1)), abs=0.05)
    assert tool.output_kind == "audio" and tool.model_key[1] == "text-to-audio"


def test_text_to_speech_input_checks(vits_dir, workspace):
    tool = TextToSpeechTool(model=vits_dir, device="cpu", manager=ModelManager(), options={"max_chars": 20})
    with pytest.raises(ToolInputError, match="needs the text to speak"):
        tool.run({"text": "   "})
    with pytest.raises(ToolInputError, match="34 characters long; text-to-speech speaks at most 20"):
        tool.run("this sentence is far too long!!!!!")
    assert not tool.is_loaded()


def test_a_voice_with_no_sound_for_the_text_says_so(vits_dir, workspace):
    tool = TextToSpeechTool(model=vits_dir, device="cpu", manager=ModelManager())
    for text in ("你好", "12345", "\U0001f600"):  # the tiny English VITS has letters only
        with pytest.raises(ToolInputError, match="has no sound for any character.*text_to_speech_model"):
            tool.run(text)
    assert tool.run("hello").startswith("Spoke the text into audio/")


def test_text_to_speech_remote_shapes(fake_endpoint, workspace):
    fake_endpoint.reply_bytes(wav_bytes(0.5, 22050), "audio/wav")
    fake_endpoint.reply_bytes(b"fLaC\x00\x00\x00\x22 not really flac", "audio/flac")
    fake_endpoint.reply_json([{"audio": [0.0, 0.5, -0.5, 0.25] * 2000, "sampling_rate": 8000}])
    fake_endpoint.reply_bytes(b"<html>", "application/octet-stream")
    tool = TextToSpeechTool.from_config(text_to_speech_endpoint=fake_endpoint.url)
    first = TTS.fullmatch(tool.run("hello"))
    assert first and first.group(3, 4) == ("0.5", "22050")
    assert (workspace / first.group(1)).read_bytes() == wav_bytes(0.5, 22050)
    assert json.loads(fake_endpoint.requests[0]["body"]) == {"inputs": "hello"}
    second = tool.run("hello")
    assert re.fullmatch(r"Spoke the text into audio/[0-9a-f]{8}\.flac \(length unknown\)\.", second)
    third = TTS.fullmatch(tool.run("hello"))
    assert third and third.group(3, 4) == ("1.0", "8000")
    with pytest.raises(ToolExecutionError, match="not audio this tool knows"):
        tool.run("hello")


def test_eight_threads_on_a_cold_audio_tool_load_once(vits_dir, workspace):
    manager = ModelManager()
    tool = TextToSpeechTool(model=vits_dir, device="cpu", manager=manager)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def call(i):
        barrier.wait()
        try:
            results.append(tool.run(f"hello number {'abcdefgh'[i]}"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8
    names = {TTS.fullmatch(r).group(1) for r in results}
    assert len(names) == 8 and all((workspace / n).is_file() for n in names)  # eight distinct files
    stats = manager.stats()
    assert (stats["loads"], stats["hits"]) == (1, 7)
