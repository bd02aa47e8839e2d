"""Audio classification (tiny AST) and audio-to-audio voice conversion (tiny SpeechT5 + HiFi-GAN), local and remote."""

from __future__ import annotations

import base64
import json
import re
import shutil

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.audio_tasks import AudioClassificationTool, AudioToAudioTool
from chatgpt_tool_hub.experts.tiny import BUILDERS
from chatgpt_tool_hub.experts.tiny.audio import SOUND_LABELS
from chatgpt_tool_hub.runtime.filenames import ingest_audio, read_wav
from chatgpt_tool_hub.runtime.models.manager import ModelManager

from expert_helpers import wav_bytes

np = pytest.importorskip("numpy")

CONVERTED = re.compile(r"Converted the voice of (audio/[0-9a-f]{8}\.wav|audio/[0-9a-f]{8}_vc_[0-9a-f]{8}_[0-9a-f]{8}"
                       r"\.wav) into (audio/([0-9a-f]{8})_vc_([0-9a-f]{8})_([0-9a-f]{8})\.wav) \((\d+\.\d) s, "
                       r"(\d+) Hz\)\.(\n.*)?", re.S)


FAST = {"max_length_ratio": 1.0}  # the tiny model never stops by itself: at most 1 mel frame per encoder frame


def _built(tmp_path_factory, name: str) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return BUILDERS[name](tmp_path_factory.mktemp(name))


@pytest.fixture(scope="session")
def ast_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "audio-classification")


@pytest.fixture(scope="session")
def vc_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "audio-to-audio")


def _tone(workspace, seconds: float, rate: int = 22050) -> str:
    t = np.arange(int(rate * seconds)) / rate
    return ingest_audio((0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), workspace, rate)


# ---- audio classification ---------------------------------------------------------------------


def test_audio_classification(ast_dir, audio_file):
    tool = AudioClassificationTool.from_config(audio_classification_model=ast_dir, expert_device="cpu",
                                               audio_classification_top_k=3, audio_classification_window_s=2)
    observation = tool.run(audio_file)
    lines = observation.splitlines()
    assert lines[0] == f"Top sounds in {audio_file} (1.5 s):" and len(lines) == 4
    found = [re.fullmatch(r"- (\w+): (\d\.\d{3})", line).groups() for line in lines[1:]]
    assert all(label in SOUND_LABELS for label, _ in found)
    scores = [float(s) for _, s in found]
    assert scores == sorted(scores, reverse=True)
    assert observation.value == found[0][0]
    assert tool.model_key[1] == "audio-classification" and tool.load().model.config.model_type == (
        "audio-spectrogram-transformer")


def test_long_audio_is_classified_in_windows(ast_dir, workspace):
    long = _tone(workspace, 4.0)
    tool = AudioClassificationTool(model=ast_dir, device="cpu", manager=ModelManager(),
                                   options={"max_windows": 3, "top_k": 6})
    lines = tool.run(long).splitlines()  # the tiny AST hears 100 frames (1 s) at a time
    assert lines[-1] == ("Note: the 4.0 s of audio were classified in 3 windows of 1 s and their scores averaged; "
                         "only the first 3.0 s were heard (audio_classification_max_windows).")
    scores = [float(line.rsplit(": ", 1)[1]) for line in lines[1:-1]]
    assert len(scores) == 6 and sum(scores) == pytest.approx(1, abs=0.004)  # the average of softmax scores
    wide = AudioClassificationTool(model=ast_dir, device="cpu", manager=tool.manager, options={"window_s": 5.0})
    assert "\n- " in wide.run(long) and "Note" not in wide.run(long)  # one window: no note


def test_audio_classification_bad_input(ast_dir, workspace):
    tool = AudioClassificationTool(model=ast_dir, device="cpu", manager=ModelManager())
    (workspace / "audio").mkdir(exist_ok=True)
    (workspace / "audio" / "song.mp3").write_bytes(b"ID3\x03\x00fake mp3")
    with pytest.raises(ToolInputError, match="'song.mp3' is not a WAV file .*convert it to 16-bit PCM WAV"):
        tool.run("audio/song.mp3")
    with pytest.raises(ToolInputError, match="file 'audio/ghost.wav' does not exist"):
        tool.run({"audio": "audio/ghost.wav"})
    (workspace / "audio" / "empty.wav").write_bytes(wav_bytes(0))
    with pytest.raises(ToolInputError, match="'empty.wav' holds no audio samples"):
        tool.run("audio/empty.wav")


def test_audio_classification_remote(fake_endpoint, audio_file, workspace):
    fake_endpoint.reply_json([{"label": "Music", "score": 0.2}, {"label": "Dog", "score": 0.7}])
    tool = AudioClassificationTool.from_config(audio_classification_endpoint=fake_endpoint.url)
    observation = tool.run(audio_file)
    assert observation == f"Top sounds in {audio_file} (1.5 s):\n- Dog: 0.700\n- Music: 0.200"
    assert observation.value == "Dog"
    assert fake_endpoint.requests[0]["body"] == (workspace / audio_file).read_bytes()


# ---- audio-to-audio ---------------------------------------------------------------------------


def test_voice_conversion_writes_a_chained_wav(vc_dir, audio_file, workspace):
    tool = AudioToAudioTool.from_config(audio_to_audio_model=vc_dir, expert_device="cpu",
                                       audio_to_audio_max_length_ratio=1)
    observation = tool.run(audio_file)
    match = CONVERTED.fullmatch(observation)
    assert match and match.group(1) == audio_file and not match.group(8), observation
    uuid = audio_file.split("/")[1][:8]
    assert match.group(4) == match.group(5) == uuid  # {new}_vc_{prev}_{org}
    assert observation.value == match.group(2) and tool.output_kind == "audio"
    samples, rate = read_wav(workspace / match.group(2))
    assert rate == int(match.group(7)) == 16000 and len(samples) > 0 and np.abs(samples).max() <= 1.0
    assert float(match.group(6)) == pytest.approx(len(samples) / rate, abs=0.05)
    again = CONVERTED.fullmatch(tool.run(match.group(2)))  # converting the output keeps the original's uuid
    assert again.group(4) == match.group(3) and again.group(5) == uuid
    model = tool.load()
    assert type(model).__name__ == "VoiceConverter" and set(model.components) == {"model", "vocoder"}
    assert not model.default_speaker and model.speaker.shape == (16,)  # speaker_embedding.npy of the folder


def test_voice_conversion_speaker_embeddings(vc_dir, audio_file, workspace, tmp_path):
    folder = tmp_path / "no-speaker"
    shutil.copytree(vc_dir, folder)
    (folder / "speaker_embedding.npy").unlink()
    tool = AudioToAudioTool(model=str(folder), device="cpu", manager=ModelManager(), options=FAST)
    match = CONVERTED.fullmatch(tool.run(audio_file))
    assert match.group(8) == ("\nNote: no speaker embedding is set, so a neutral voice was used; set "
                              "audio_to_audio_speaker_embedding to an x-vector file to choose the voice.")
    assert not tool.load().speaker.any()
    (workspace / "voice.json").write_text(json.dumps([0.1] * 16))  # relative to the workspace
    chosen = AudioToAudioTool(model=str(folder), device="cpu", manager=ModelManager(),
                              options={**FAST, "speaker_embedding": "voice.json"})
    assert not CONVERTED.fullmatch(chosen.run(audio_file)).group(8)
    assert chosen.load().speaker.tolist() == pytest.approx([0.1] * 16)
    np.save(tmp_path / "short.npy", np.zeros(5, dtype=np.float32))
    wrong = AudioToAudioTool(model=str(folder), device="cpu", manager=ModelManager(),
                             options={"speaker_embedding": str(tmp_path / "short.npy")})
    with pytest.raises(ToolExecutionError, match=r"audio_to_audio_speaker_embedding=.*short\.npy' holds 5 numbers; the "
                                                 r"model needs a speaker embedding of 16"):
        wrong.run(audio_file)
    missing = AudioToAudioTool(model=str(folder), device="cpu", manager=ModelManager(),
                               options={"speaker_embedding": "nowhere.npy"})
    with pytest.raises(ToolExecutionError, match="audio_to_audio_speaker_embedding='nowhere.npy': no such file"):
        missing.run(audio_file)


@pytest.mark.slow
def test_voice_conversion_of_long_audio_in_pieces(vc_dir, workspace):
    long = _tone(workspace, 2.0)
    tool = AudioToAudioTool(model=vc_dir, device="cpu", manager=ModelManager(), options={**FAST, "chunk_s": 1.0})
    whole = AudioToAudioTool(model=vc_dir, device="cpu", manager=tool.manager, options={**FAST, "chunk_s": 20.0})
    pieces = CONVERTED.fullmatch(tool.run(long))
    single = CONVERTED.fullmatch(whole.run(long))
    # the tiny model never stops early: each piece gives max_length_ratio x its frames; the output adds up
    assert pieces and single and float(pieces.group(6)) == pytest.approx(float(single.group(6)), abs=0.1)


def test_voice_conversion_errors(vc_dir, ast_dir, audio_file, workspace, tmp_path):
    folder = tmp_path / "no-vocoder"
    shutil.copytree(vc_dir, folder)
    shutil.rmtree(folder / "vocoder")
    tool = AudioToAudioTool(model=str(folder), device="cpu", manager=ModelManager(),
                            options={"vocoder": str(tmp_path / "missing-vocoder")})
    with pytest.raises(ToolExecutionError, match="missing-vocoder.* no such folder; set audio_to_audio_vocoder"):
        tool.run(audio_file)
    other = AudioToAudioTool(model=ast_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolExecutionError, match="is a audio-spectrogram-transformer model, not SpeechT5 voice "
                                                 "conversion.*set audio_to_audio_model"):
        other.run(audio_file)
    (workspace / "audio" / "clip.wav").write_bytes(b"RIFF\x00\x00not a wave")
    with pytest.raises(ToolInputError, match="'clip.wav' is not a WAV file"):
        AudioToAudioTool(model=vc_dir, device="cpu", manager=ModelManager()).run("audio/clip.wav")
    short = ingest_audio(np.zeros(100, dtype=np.float32), workspace, 16000)
    with pytest.raises(ToolExecutionError, match="the audio is too short to convert"):
        AudioToAudioTool(model=vc_dir, device="cpu", manager=ModelManager()).run(short)


@pytest.mark.parametrize("cls", [AudioClassificationTool, AudioToAudioTool])
def test_a_missing_model_folder_names_the_setting(cls, tmp_path, audio_file):
    key = cls.name.replace("-", "_") + "_model"
    tool = cls.from_config(**{key: str(tmp_path / "nothing-here"), "expert_device": "cpu"})
    with pytest.raises(ToolExecutionError, match=rf"could not load model .*nothing-here.* for {cls.name}: no such "
                                                 rf"folder; set {key} to a folder made by save_pretrained"):
        tool.run(audio_file)


def test_voice_conversion_remote(fake_endpoint, audio_file, workspace):
    fake_endpoint.reply_bytes(wav_bytes(0.5, 16000), "audio/wav")
    fake_endpoint.reply_json([{"label": "speech", "blob": base64.b64encode(wav_bytes(0.25, 8000)).decode(),
                               "content-type": "audio/wav"}])
    fake_endpoint.reply_json([{"label": "speech"}])
    tool = AudioToAudioTool.from_config(audio_to_audio_endpoint=fake_endpoint.url)
    first = CONVERTED.fullmatch(tool.run(audio_file))
    assert first and first.group(6, 7) == ("0.5", "16000")
    assert (workspace / first.group(2)).read_bytes() == wav_bytes(0.5, 16000)
    second = CONVERTED.fullmatch(tool.run(audio_file))
    assert second and second.group(6, 7) == ("0.2", "8000") or second.group(6, 7) == ("0.3", "8000")
    with pytest.raises(ToolExecutionError, match="the endpoint sent no audio"):
        tool.run(audio_file)


@pytest.mark.slow
def test_voice_conversion_through_a_react_app(vc_dir, audio_file, workspace):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        f'Thought: Do I need to use a tool? Yes\nAction: audio-to-audio\nAction Input: {{"audio": "{audio_file}"}}',
        "Thought: Do I need to use a tool? No\nAI: done",
    ])
    tool = AudioToAudioTool.from_config(audio_to_audio_model=vc_dir, expert_device="cpu",
                                       audio_to_audio_max_length_ratio=1)
    app = AppFactory().create_app(tools_list=[tool], llm=llm, no_default=True)
    assert app.ask(f"say {audio_file} in another voice") == "done"
    match = CONVERTED.search(llm.requests[1][-1]["content"])
    assert match and (workspace / match.group(2)).is_file()
