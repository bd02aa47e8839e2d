"""A chat UI's own task prompts, and the direct model, go to the LLM without a tool run.

Open WebUI asks the chat's model for titles, tags, follow-ups, search queries
and autocompletions with its task templates (one user message starting
``### Task:``). ``serve_auxiliary_passthrough`` (on by default) answers them
with one plain LLM call; ``serve_direct_model`` (``tool-hub-direct``) does the
same for every request, for a UI's "task model".
"""

from __future__ import annotations

import threading

import httpx
import openai
import pytest
from test_server_support import live, wait_for  # noqa: F401 - the fixture

from chatgpt_tool_hub.server.auxiliary import task_kind
from chatgpt_tool_hub.testing import ScriptedLLM
from tests.chat_server import ChatServer, _prompt_tokens

from helpers import answer

HISTORY = "<chat_history>\nUSER: How do I bake chocolate chip cookies?\nASSISTANT: Cream butter and sugar...\n</chat_history>"
# the shapes of Open WebUI's default task templates, filled in (their sections, history block and JSON asked for)
TITLE = ("### Task:\nGenerate a concise title summarizing the chat history.\n### Guidelines:\n- Keep it short.\n"
         "### Output:\nJSON format: { \"title\": \"your concise title here\" }\n### Examples:\n"
         "- { \"title\": \"Stock Trends\" }\n### Chat History:\n" + HISTORY)
TAGS = ("### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat history.\n\n### Guidelines:\n"
        "- Start with high-level domains\n\n### Output:\nJSON format: { \"tags\": [\"tag1\", \"tag2\", \"tag3\"] }\n\n"
        "### Chat History:\n" + HISTORY)
FOLLOW_UPS = ("### Task:\nSuggest 3-5 relevant follow-up questions or prompts that the user might naturally ask "
              "next.\n### Guidelines:\n- Write all follow-up questions from the user's point of view.\n### Output:\n"
              "JSON format: { \"follow_ups\": [\"Question 1?\", \"Question 2?\", \"Question 3?\"] }\n"
              "### Chat History:\n" + HISTORY)
QUERIES = ("### Task:\nAnalyze the chat history to determine the necessity of generating search queries.\n\n"
           "### Guidelines:\n- Respond **EXCLUSIVELY** with a JSON object, in the format: { \"queries\": "
           "[\"query1\", \"query2\"] }\n- Today's date is: 2025-01-01.\n\n### Output:\nStrictly return in JSON "
           "format: \n{\n  \"queries\": [\"query1\", \"query2\"]\n}\n\n### Chat History:\n" + HISTORY)
AUTOCOMPLETE = ("### Task:\nYou are an autocompletion system. Continue the text in `<text>`.\n\n### **Instructions**:\n"
                "1. Analyze `<text>` for context and meaning.\n\n### **Output Rules**:\n- Respond only in JSON "
                "format: `{ \"text\": \"<your_completion>\" }`.\n\n---\n### Context:\n" + HISTORY +
                "\n<type>General</type>\n<text>The sun was setting</text>\n#### Output:\n")
IMAGE_PROMPT = ("### Task:\nGenerate a detailed prompt for an image generation task.\n\n### Guidelines:\n- Be "
                "descriptive.\n\n### Output:\nStrictly return in JSON format:\n{\n    \"prompt\": \"Your detailed "
                "description here.\"\n}\n\n### Chat History:\n" + HISTORY)


def _task(text: str, **extra) -> dict:
    return {"model": "tool-hub", "messages": [{"role": "user", "content": text}], "stream": False, **extra}


@pytest.mark.parametrize("text, kind", [(TITLE, "title"), (TAGS, "tags"), (FOLLOW_UPS, "follow_ups"),
                                        (QUERIES, "queries"), (AUTOCOMPLETE, "autocomplete"),
                                        (IMAGE_PROMPT, "image_prompt")])
def test_open_webuis_task_prompts_are_recognised(text, kind):
    assert task_kind(_task(text)) == kind
    assert task_kind(_task(text, max_completion_tokens=1000)) == kind
    with_system = {"model": "m", "messages": [{"role": "system", "content": "You are helpful."},
                                              {"role": "user", "content": "\n" + text}]}
    assert task_kind(with_system) == kind  # a model's own system prompt goes first
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    assert task_kind(parts) == kind
    other = TITLE.replace("concise title", "short name").replace('"title"', '"name"')
    assert task_kind(_task(other)) == "task"  # an operator's own template of the same shape


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "My notes say:\n### Task:\nGenerate a title\n### Output:\nJSON please"}],
    [{"role": "user", "content": "Explain what '### Task:' means in this prompt:\n" + TITLE}],
    [{"role": "user", "content": "### Task: write me a poem about JSON"}],            # no sections
    [{"role": "user", "content": "### Task:\nsort my files\n### Guidelines:\n- fast"}],  # no history, no JSON
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
     {"role": "user", "content": TITLE}],                                               # within a conversation
    [{"role": "user", "content": TITLE}, {"role": "assistant", "content": "{"}],        # the last is not the user's
    [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
])
def test_questions_are_not_task_prompts(messages):
    assert task_kind({"model": "tool-hub", "messages": messages}) is None


def test_a_request_with_tools_or_no_messages_is_not_a_task_prompt():
    assert task_kind(_task(TITLE, tools=[{"type": "function", "function": {"name": "f"}}])) is None
    assert task_kind({"model": "tool-hub"}) is None and task_kind("### Task:") is None
    assert task_kind({"messages": "### Task:"}) is None


@pytest.mark.parametrize("text", [TITLE, TAGS, FOLLOW_UPS])
def test_a_task_prompt_is_one_llm_call_with_no_tool_run(live, text):
    llm = ScriptedLLM(['{ "title": "Cookie Baking" }'])
    server = live(llm=llm, tools_list=["python"])
    reply = server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": text}],
                                                    max_completion_tokens=1000)
    assert reply.choices[0].message.content == '{ "title": "Cookie Baking" }'  # the LLM's text, as it is
    assert llm.requests == [[{"role": "user", "content": text}]]  # one call, no engine prompt, no tool
    assert "reasoning_content" not in (reply.choices[0].message.model_extra or {})
    assert reply.model == "tool-hub" and reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert server.state.apps.users() == []  # no user's app was even built
    wait_for(lambda: server.state.slots.used == 0, 10)  # the run slot is given back once the response is sent


@pytest.mark.parametrize("text", [TITLE, TAGS, FOLLOW_UPS])
def test_a_streamed_task_prompt_streams_the_llms_text(live, text):
    words = '{ "follow_ups": ["How long do they bake?", "Can I use oil?"] }'
    llm = ScriptedLLM([words], chunk_size=1)
    server = live(llm=llm)
    stream = server.client().chat.completions.create(model="tool-hub", stream=True, messages=[
        {"role": "user", "content": text}], stream_options={"include_usage": True})
    pieces, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices:
            pieces += [chunk.choices[0].delta.content] if chunk.choices[0].delta.content else []
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == words and len(pieces) > 3  # as the LLM wrote it, in pieces
    assert finish == "stop" and usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.completion_tokens > 0
    assert llm.requests == [[{"role": "user", "content": text}]]


def test_a_question_that_mentions_task_in_prose_runs_the_engine(live):
    llm = ScriptedLLM([answer("a heading")])
    server = live(llm=llm)
    question = "In my markdown, what does the line '### Task:' do? It precedes ### Output: and JSON."
    reply = server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": question}])
    assert reply.choices[0].message.content == "a heading"  # parsed by the engine, not the raw text
    assert llm.requests[0][0]["role"] == "system" and llm.requests[0][-1]["content"] == question


def test_with_the_passthrough_off_a_task_prompt_runs_the_engine(live):
    llm = ScriptedLLM([answer('{ "title": "Cookies" }')])
    server = live(llm=llm, serve_auxiliary_passthrough=False)
    reply = server.client().chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": TITLE}])
    assert reply.choices[0].message.content == '{ "title": "Cookies" }'
    assert llm.requests[0][0]["role"] == "system"  # the engine's prompt came first


def test_the_direct_model_is_listed_and_sends_the_request_as_it_is(live):
    with ChatServer(["Paris."]) as upstream:
        server = live(llm_api_base_url=upstream.url, model_name="upstream-model", max_retries=0)
        assert "tool-hub-direct" in [m.id for m in server.client().models.list().data]
        messages = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "France?"},
                    {"role": "assistant", "content": "Its capital?"}, {"role": "user", "content": "Yes."}]
        reply = server.client().chat.completions.create(model="tool-hub-direct", messages=messages,
                                                        temperature=0.3, max_tokens=12)
        assert reply.choices[0].message.content == "Paris." and reply.model == "tool-hub-direct"
        (body,) = upstream.bodies
        assert body["messages"] == messages and body["model"] == "upstream-model"
        assert body["temperature"] == 0.3 and body["max_tokens"] == 12
        assert reply.usage.prompt_tokens == _prompt_tokens(body)  # the upstream's own count, passed on


def test_the_direct_model_streams_through_an_upstream_server(live):
    with ChatServer(["one two three four five"]) as upstream:
        server = live(llm_api_base_url=upstream.url, model_name="m", max_retries=0)
        stream = server.client().chat.completions.create(model="tool-hub-direct", stream=True,
                                                         messages=[{"role": "user", "content": "count"}])
        pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
        assert "".join(pieces) == "one two three four five"
        assert upstream.bodies[-1]["stream"] is True and len(upstream.bodies) == 1


def test_the_direct_model_can_be_renamed_or_turned_off(live):
    server = live(llm=ScriptedLLM(["hi"]), serve_direct_model="task-model")
    assert server.client().chat.completions.create(model="task-model", messages=[
        {"role": "user", "content": "hi"}]).choices[0].message.content == "hi"
    off = live(llm=ScriptedLLM([]), serve_direct_model="off")
    assert "tool-hub-direct" not in [m.id for m in off.client().models.list().data]
    with pytest.raises(openai.NotFoundError):
        off.client().chat.completions.create(model="tool-hub-direct", messages=[{"role": "user", "content": "hi"}])


def test_a_passthrough_takes_a_run_slot_and_gives_it_back(live):
    gate, started = threading.Event(), threading.Event()

    def slow():
        started.set()
        gate.wait(30)
        return "late title"

    server = live(llm=ScriptedLLM([slow, "next"]), serve_max_concurrent_runs=1)
    first = threading.Thread(target=lambda: server.client().chat.completions.create(
        model="tool-hub", messages=[{"role": "user", "content": TITLE}]))
    first.start()
    try:
        assert started.wait(30)
        with pytest.raises(openai.RateLimitError):
            server.client().chat.completions.create(model="tool-hub-direct", messages=[{"role": "user", "content": "x"}])
    finally:
        gate.set()
        first.join(30)
    wait_for(lambda: server.state.slots.used == 0, 10)  # given back once the response was sent
    assert server.client().chat.completions.create(model="tool-hub-direct", messages=[
        {"role": "user", "content": "x"}]).choices[0].message.content == "next"


def test_a_malformed_direct_request_is_a_400_that_says_why(live):
    server = live(llm=ScriptedLLM([]))
    response = httpx.post(server.url + "/chat/completions", headers=server.auth,
                          json={"model": "tool-hub-direct", "messages": [{"role": "user", "content": "x"}],
                                "temperature": 5})
    assert response.status_code == 400 and "temperature" in response.json()["error"]["message"]
