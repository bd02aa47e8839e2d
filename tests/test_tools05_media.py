"""``stt`` / ``tts`` against a local fake of Azure Speech's REST API, ``visual`` against the local
chat-completions server, and ``wechat``'s refusal."""

from __future__ import annotations

import base64
import io
import struct
import wave
import zlib
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, MissingKeyError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.plugins.speech import SttTool, TtsTool, detect_language, to_pcm16_mono
from chatgpt_tool_hub.tools.plugins.visual import VisualTool, image_mime
from chatgpt_tool_hub.tools.plugins.wechat import WechatTool
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from helpers import act, answer
from service_fixtures import chatbot_kwargs, service_server  # noqa: F401

STT_KEY = "stt-SECRET-key-123"
TTS_KEY = "tts-SECRET-key-456"
CAPTION_KEY = "caption-SECRET-key-789"
STT_PATH = "/speech/recognition/conversation/cognitiveservices/v1"


def wav_bytes(rate: int = 8000, channels: int = 2, seconds: float = 0.5) -> bytes:
    frames = int(rate * seconds)
    samples = b"".join(struct.pack("<h", (i * 37) % 2000 - 1000) * channels for i in range(frames))
    out = io.BytesIO()
    with wave.open(out, "wb") as dst:
        dst.setnchannels(channels)
        dst.setsampwidth(2)
        dst.setframerate(rate)
        dst.writeframes(samples)
    return out.getvalue()


def png_bytes() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = zlib.compress(b"\x00\xff\x00\x00")  # one red pixel
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def workspace_file(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / "ws" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return tmp_path / "ws"


# ---- stt -----------------------------------------------------------------------------------------------


def test_stt_posts_16khz_mono_wav_to_azure_and_returns_the_transcript(service_server, tmp_path):
    service_server.route(STT_PATH, {"RecognitionStatus": "Success", "DisplayText": "你好，世界。", "Offset": 0,
                                    "Duration": 5000000})
    ws = workspace_file(tmp_path, "audio/1a2b3c4d.wav", wav_bytes(rate=8000, channels=2))
    tool = SttTool.from_config(**chatbot_kwargs(stt_api_key=STT_KEY, stt_api_region="eastasia",
                                                stt_api_base_url=service_server.url, workspace_dir=str(ws)))
    out = tool.run({"audio": "audio/1a2b3c4d.wav"})
    assert out == 'Transcript of audio/1a2b3c4d.wav (0.5 s): "你好，世界。"' and out.value == "你好，世界。"
    request = service_server.requests[0]
    assert request["method"] == "POST" and request["query"] == {"language": "zh-CN", "format": "simple"}
    assert request["headers"]["ocp-apim-subscription-key"] == STT_KEY
    assert request["headers"]["content-type"] == "audio/wav; codecs=audio/pcm; samplerate=16000"
    with wave.open(io.BytesIO(request["body"]), "rb") as sent:
        assert (sent.getnchannels(), sent.getsampwidth(), sent.getframerate()) == (1, 2, 16000)
        assert sent.getnframes() == 8000  # 0.5 s at 16 kHz
    tool.run({"audio": "audio/1a2b3c4d.wav", "language": "en-US"})
    assert service_server.requests[1]["query"]["language"] == "en-US"
    assert tool.run(" audio/1a2b3c4d.wav").value == "你好，世界。"  # plain text, as a chat user types it


def test_stt_without_speech_or_with_a_bad_file(service_server, tmp_path):
    service_server.route(STT_PATH, {"RecognitionStatus": "InitialSilenceTimeout"})
    ws = workspace_file(tmp_path, "audio/a.wav", wav_bytes(rate=16000, channels=1))
    (ws / "audio" / "b.wav").write_bytes(b"not a wav at all")
    tool = SttTool.from_config(stt_api_key=STT_KEY, stt_api_base_url=service_server.url, workspace_dir=str(ws))
    assert tool.run({"audio": "audio/a.wav"}) == "No speech was recognised in audio/a.wav (0.5 s): the audio starts with silence only."
    with pytest.raises(ToolInputError, match="not a PCM WAV file"):
        tool.run({"audio": "audio/b.wav"})
    with pytest.raises(ToolInputError, match="does not exist"):
        tool.run({"audio": "audio/missing.wav"})
    service_server.route(STT_PATH, {"error": "bad key"}, status=401)
    with pytest.raises(ToolExecutionError) as info:
        tool.run({"audio": "audio/a.wav"})
    assert "check stt_api_key and stt_api_region and the region" in str(info.value) and STT_KEY not in str(info.value)


def test_stt_and_tts_without_a_key_point_at_the_local_expert_tools(tmp_path):
    for name, local in (("stt", "speech-recognition"), ("tts", "text-to-speech")):
        factory, keys = main_tool_register.get_registered_tool()[name]
        assert keys == []  # the key is optional: an app lists the tool without it
        out = factory(**chatbot_kwargs(workspace_dir=str(tmp_path))).run('{"audio": "a.wav"}' if name == "stt"
                                                                         else "hello")
        assert out.startswith(f"Error: the {name} tool has no Azure Speech key: set {name}_api_key and "
                              f"{name}_api_region") and f"the local {local} tool" in out
    tool = SttTool.from_config(stt_api_key=STT_KEY, workspace_dir=str(tmp_path))
    with pytest.raises(ToolExecutionError, match="needs stt_api_region"):
        tool.run({"audio": "a.wav"})
    assert SttTool.from_config(stt_api_key=STT_KEY, stt_api_region="westeurope")._endpoint("/p") == \
        "https://westeurope.stt.speech.microsoft.com/p"
    assert STT_KEY not in repr(tool)


def test_long_audio_is_refused_before_it_is_sent(service_server, tmp_path):
    ws = workspace_file(tmp_path, "audio/long.wav", wav_bytes(rate=8000, channels=1, seconds=61))
    tool = SttTool.from_config(stt_api_key=STT_KEY, stt_api_base_url=service_server.url, workspace_dir=str(ws))
    with pytest.raises(ToolInputError, match="61 s long; .* at most 60 s .*speech-recognition"):
        tool.run({"audio": "audio/long.wav"})
    assert service_server.requests == []


def test_pcm_conversion_keeps_the_length():
    converted, seconds = to_pcm16_mono(wav_bytes(rate=22050, channels=2, seconds=1.0), "x.wav")
    with wave.open(io.BytesIO(converted), "rb") as src:
        assert (src.getframerate(), src.getnchannels(), src.getnframes()) == (16000, 1, 16000)
    assert seconds == pytest.approx(1.0)


# ---- tts -----------------------------------------------------------------------------------------------


def test_tts_posts_ssml_and_saves_the_wav_in_the_workspace(service_server, tmp_path):
    service_server.route("/cognitiveservices/v1", wav_bytes(rate=24000, channels=1, seconds=0.25),
                         content_type="audio/wav")
    tool = TtsTool.from_config(**chatbot_kwargs(tts_api_key=TTS_KEY, tts_api_region="eastasia",
                                                tts_api_base_url=service_server.url, workspace_dir=str(tmp_path)))
    out = tool.run("天冷了，多穿 <衣服> & 注意休息")
    assert out.startswith("Spoke the text into audio/") and out.endswith(".wav (voice zh-CN-XiaozhenNeural, 0.2 s).")
    assert (tmp_path / out.value).read_bytes().startswith(b"RIFF")
    request = service_server.requests[0]
    assert request["headers"]["ocp-apim-subscription-key"] == TTS_KEY
    assert request["headers"]["x-microsoft-outputformat"] == "riff-24khz-16bit-mono-pcm"
    assert request["headers"]["content-type"] == "application/ssml+xml"
    ssml = request["body"].decode()
    assert "xml:lang=\"zh-CN\"" in ssml and "<voice name=\"zh-CN-XiaozhenNeural\">" in ssml
    assert "多穿 &lt;衣服&gt; &amp; 注意休息" in ssml


def test_tts_auto_detect_picks_a_voice_of_the_texts_language(service_server, tmp_path):
    service_server.route("/cognitiveservices/v1", wav_bytes(rate=24000, channels=1), content_type="audio/wav")
    kwargs = dict(tts_api_key=TTS_KEY, tts_api_base_url=service_server.url, workspace_dir=str(tmp_path))
    tool = TtsTool.from_config(**kwargs)
    assert tool.voice_for("Good morning, how are you?") == "en-US-JacobNeural"
    assert tool.voice_for("今日は良い天気ですね") == "ja-JP-AoiNeural"
    assert tool.voice_for("早上好") == "zh-CN-XiaozhenNeural"
    assert TtsTool.from_config(**kwargs, tts_speech_id="en-GB-SoniaNeural").voice_for("Hello there") == "en-GB-SoniaNeural"
    assert TtsTool.from_config(**kwargs, tts_auto_detect=False).voice_for("Hello there") == "zh-CN-XiaozhenNeural"
    tool.run("Good morning")
    assert "<voice name=\"en-US-JacobNeural\">" in service_server.requests[0]["body"].decode()
    assert [detect_language(t) for t in ("Das ist nicht gut und der Hund", "le chat et la souris", "hola, ¿qué tal?",
                                         "안녕하세요")] == ["de", "fr", "es", "ko"]


def test_tts_refuses_what_is_not_audio_and_overlong_text(service_server, tmp_path):
    service_server.route("/cognitiveservices/v1", "<html>gateway</html>", content_type="text/html")
    tool = TtsTool.from_config(tts_api_key=TTS_KEY, tts_api_base_url=service_server.url, workspace_dir=str(tmp_path),
                               tts_max_chars=10)
    with pytest.raises(ToolExecutionError, match="not WAV audio; is tts_api_base_url right"):
        tool.run("short")
    with pytest.raises(ToolInputError, match="at most 10 at a time"):
        tool.run("far too long a text")


# ---- visual --------------------------------------------------------------------------------------------


def test_visual_sends_the_image_as_a_data_uri_to_the_vision_model(chat_server, tmp_path):
    ws = workspace_file(tmp_path, "image/1a2b3c4d.png", png_bytes())
    chat_server.replies = ["A single red pixel."]
    tool = VisualTool.from_config(**chatbot_kwargs(caption_api_key=CAPTION_KEY, caption_api_base_url=chat_server.url,
                                                   workspace_dir=str(ws), max_retries=0))
    out = tool.run("image/1a2b3c4d.png what colour is it?")
    assert out == "image/1a2b3c4d.png: A single red pixel." and out.value == "A single red pixel."
    body = chat_server.bodies[0]
    assert body["model"] == "qwen-vl-plus"
    text, image = body["messages"][0]["content"]
    assert text == {"type": "text", "text": "what colour is it?"}
    assert image["type"] == "image_url"
    assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    assert chat_server.requests[0]["headers"]["authorization"] == f"Bearer {CAPTION_KEY}"
    assert CAPTION_KEY not in repr(tool)


def test_visual_passes_urls_on_and_describes_by_default(chat_server, tmp_path):
    tool = VisualTool.from_config(caption_api_key=CAPTION_KEY, caption_api_base_url=chat_server.url,
                                  caption_model_name="llava", workspace_dir=str(tmp_path), max_retries=0)
    tool.run({"image_url": "https://img.example.test/dog.jpeg"})
    body = chat_server.bodies[0]
    assert body["model"] == "llava"
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Describe this image in detail."},
        {"type": "image_url", "image_url": {"url": "https://img.example.test/dog.jpeg"}}]


def test_visual_errors_name_its_own_settings(chat_server, tmp_path):
    ws = workspace_file(tmp_path, "image/a.png", png_bytes())
    (ws / "image" / "b.png").write_bytes(b"GIF? no, text")
    chat_server.api_key = "the-right-key"
    tool = VisualTool.from_config(caption_api_key=CAPTION_KEY, caption_api_base_url=chat_server.url,
                                  workspace_dir=str(ws), max_retries=0)
    with pytest.raises(ToolExecutionError) as info:
        tool.run({"image": "image/a.png"})
    text = str(info.value)
    assert "HTTP 401" in text and "check caption_api_key, caption_model_name" in text and "llm_api_key" not in text
    assert CAPTION_KEY not in text
    with pytest.raises(ToolInputError, match="not a PNG, JPEG, GIF, WebP or BMP image"):
        tool.run({"image": "image/b.png"})
    with pytest.raises(ToolInputError, match="does not exist"):
        tool.run({"image": "image/nope.png"})
    assert image_mime(b"\xff\xd8\xff\xe0....") == "image/jpeg"


def test_visual_needs_its_key_when_listed_and_works_in_an_app(chat_server, tmp_path):
    llm = ScriptedLLM([])
    with pytest.raises(MissingKeyError, match="tool 'visual' needs caption_api_key"):
        AppFactory().create_app(tools_list=["visual"], llm=llm, **chatbot_kwargs())
    ws = workspace_file(tmp_path, "image/a.png", png_bytes())
    chat_server.replies = ["a red square"]
    llm = ScriptedLLM([act("visual", '{"image": "image/a.png", "question": "what is it?"}'), answer("It is red.")])
    app = AppFactory().create_app(tools_list=["visual"], llm=llm, **chatbot_kwargs(
        no_default=True, caption_api_key=CAPTION_KEY, caption_api_base_url=chat_server.url,
        workspace_dir=str(ws), max_retries=0))
    result = app.run("what is in image/a.png?")
    assert result.steps[0].observation == "image/a.png: a red square" and result.output == "It is red."


# ---- wechat --------------------------------------------------------------------------------------------


def test_wechat_is_registered_but_not_offered():
    assert "wechat" in main_tool_register.get_registered_tool_names()
    with pytest.raises(ConfigError, match="the wechat tool is not offered: .* missing from 0.5's own wheel") as info:
        AppFactory().create_app(tools_list=["wechat"], llm=ScriptedLLM([]), **chatbot_kwargs())
    assert info.value.key == "tools_list" and "email or sms" in str(info.value)
    with pytest.raises(ConfigError):
        WechatTool.from_config()
    factory, _ = main_tool_register.get_registered_tool()["wechat"]
    out = factory(**chatbot_kwargs()).run(" 给 fish 发条问候")  # pure mode: the reason, as text
    assert out.startswith("Error: the wechat tool is not offered")
