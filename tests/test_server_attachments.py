"""Files a client sends with its question: OpenAI's ``file`` and ``input_audio`` content parts land in the
user's workspace like images do and are announced, so the document and speech tools reach them from any
client (chat completions and the Responses API)."""

from __future__ import annotations

import base64
import io
import re
import wave

import openai
import pytest
from test_server_support import live, user_workspace  # noqa: F401 - the fixture

from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import answer

NOTE = "The launch code is 4721.\n"


def wav_bytes(seconds: float = 0.2, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(rate * seconds))
    return buffer.getvalue()


def read_the_announced(kind: str):
    """A scripted reply that calls read-document on the file the announcement named."""
    def reply(messages):
        text = "\n".join(str(m["content"]) for m in messages)
        name = re.search(rf"{kind}/[0-9a-f]+\.\w+", text).group(0)
        return f'Thought: Do I need to use a tool? Yes\nAction: read-document\nAction Input: {{"source": "{name}"}}'
    return reply


def file_part(data: bytes, filename: str = "note.txt") -> dict:
    return {"type": "file", "file": {"filename": filename,
                                     "file_data": "data:text/plain;base64," + base64.b64encode(data).decode()}}


def test_a_file_part_lands_in_the_workspace_and_the_document_tools_read_it(live):
    llm = ScriptedLLM([read_the_announced("document"), answer("The code is 4721.")])
    server = live(llm=llm, tools_list=["read-document"])
    reply = server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is the launch code in my note?"}, file_part(NOTE.encode())]}])
    assert reply.choices[0].message.content == "The code is 4721."
    [name] = [p.relative_to(user_workspace(server)).as_posix()
              for p in (user_workspace(server) / "document").iterdir()]
    assert (user_workspace(server) / name).read_text() == NOTE
    sent = "\n".join(str(m["content"]) for m in llm.requests[-1])
    assert f"document named {name}" in sent and "4721" in sent  # announced, then read by the tool


def test_a_wav_input_audio_part_is_checked_and_announced(live):
    llm = ScriptedLLM([answer("I got your audio.")])
    server = live(llm=llm)
    data = base64.b64encode(wav_bytes()).decode()
    server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Transcribe this"}, {"type": "input_audio",
                                                      "input_audio": {"data": data, "format": "wav"}}]}])
    [made] = list((user_workspace(server) / "audio").iterdir())
    assert made.suffix == ".wav"
    assert f"audio named audio/{made.name}" in "\n".join(str(m["content"]) for m in llm.requests[0])


@pytest.mark.parametrize("part, says", [
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}}, "WAV"),
    ({"type": "input_audio", "input_audio": {"data": base64.b64encode(b"not a wav").decode(), "format": "wav"}},
     "audio cannot be used"),
    ({"type": "file", "file": {"file_id": "file-abc"}}, "file_data"),
    (file_part(b"MZ\x90\x00", "tool.exe"), "document tools read"),
])
def test_files_the_tools_cannot_use_are_a_400_that_says_why(live, part, says):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError, match=says):
        server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": [
            {"type": "text", "text": "here"}, part]}])


def test_the_responses_api_takes_input_file_too(live):
    llm = ScriptedLLM([read_the_announced("document"), answer("4721.")])
    server = live(llm=llm, tools_list=["read-document"])
    response = server.client().responses.create(model="tool-hub", input=[{"role": "user", "content": [
        {"type": "input_text", "text": "The code?"},
        {"type": "input_file", "filename": "note.md",
         "file_data": "data:text/markdown;base64," + base64.b64encode(NOTE.encode()).decode()}]}])
    assert response.output_text == "4721."
    assert any(p.suffix == ".md" for p in (user_workspace(server) / "document").iterdir())


def test_the_responses_api_refuses_a_file_id_naming_the_input(live):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().responses.create(model="tool-hub", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "The code?"}, {"type": "input_file", "file_id": "file-abc"}]}])
    assert caught.value.body["param"] == "input" and "file_data" in caught.value.body["message"]
