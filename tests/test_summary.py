"""The summary tool: token-aware map-reduce, workspace files, URLs read as url-get reads them, and its LLM."""

from __future__ import annotations

import os
import re
import socket

import pytest

from chatgpt_tool_hub.errors import LLMConnectionError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.llm.tokens import count_tokens
from chatgpt_tool_hub.run.budget import Budget
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.base import ToolContext
from chatgpt_tool_hub.tools.plugins.summary import COMBINE_PROMPT, MAP_PROMPT, SINGLE_PROMPT, SummaryTool, split_text
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from helpers import act, answer
from service_fixtures import chatbot_kwargs, closed_port_url

LONG_TEXT = "\n\n".join(
    f"Paragraph {i}. " + " ".join(f"Sentence {i}.{j} talks about topic {i} in some detail." for j in range(6))
    for i in range(12)
)


def make(tmp_path, **overrides) -> SummaryTool:
    return SummaryTool.from_config(**chatbot_kwargs(workspace_dir=str(tmp_path / "ws"), **overrides))


def user_prompt(messages: list[dict]) -> str:
    return [m for m in messages if m["role"] == "user"][-1]["content"]


def part_summary(messages: list[dict]) -> str:
    """A map reply that names its part: 'summary of part K'."""
    k = re.search(r"PART (\d+) OF \d+:", user_prompt(messages)).group(1)
    return f"summary of part {k}"


def test_single_chunk_is_one_call(tmp_path):
    llm = ScriptedLLM(["A short summary."])
    out = make(tmp_path).run("Some text that easily fits.\nSecond line {with braces} and %s.",
                             context=ToolContext(llm=llm))
    assert out == "A short summary."
    assert llm.calls == 1
    system, user = llm.requests[0]
    assert system["role"] == "system" and "summar" in system["content"]
    assert user["content"].startswith(SINGLE_PROMPT)
    assert "Second line {with braces} and %s." in user["content"]  # user text is never formatted


@pytest.mark.parametrize("parallel", [1, 4])
def test_multi_chunk_map_reduce_takes_n_plus_one_calls(tmp_path, parallel):
    tool = make(tmp_path, summary_max_segment_length=120, summary_parallel=parallel)
    chunks = split_text(LONG_TEXT, 120)
    n = len(chunks)
    assert n >= 4
    llm = ScriptedLLM([part_summary] * n + [lambda messages: "THE FINAL SUMMARY"])
    out = tool.run(LONG_TEXT, context=ToolContext(llm=llm))
    assert out == "THE FINAL SUMMARY"
    assert llm.calls == n + 1
    map_prompts = sorted((user_prompt(r) for r in llm.requests[:n]), key=lambda p: int(re.search(r"PART (\d+)", p)[1]))
    for i, (prompt, chunk) in enumerate(zip(map_prompts, chunks, strict=True), 1):
        assert prompt.startswith(MAP_PROMPT + f"PART {i} OF {n}:\n" + chunk)
    combine = user_prompt(llm.requests[-1])
    assert combine.startswith(COMBINE_PROMPT)
    positions = [combine.index(f"PART {i}:\nsummary of part {i}") for i in range(1, n + 1)]
    assert positions == sorted(positions)  # the partial summaries are combined in document order


def test_split_text_is_lossless_and_token_bounded():
    for limit in (40, 120, 500):
        chunks = split_text(LONG_TEXT, limit)
        assert "".join(chunks) == LONG_TEXT
        assert all(count_tokens(c) <= limit + 2 for c in chunks)
    blob = "x" * 5000 + " 中文" * 300  # no boundaries at all: hard cuts
    chunks = split_text(blob, 100)
    assert "".join(chunks) == blob and all(count_tokens(c) <= 102 for c in chunks)
    assert split_text("", 10) == []


def test_partial_summaries_too_long_for_one_prompt_are_reduced_in_rounds(tmp_path):
    tool = make(tmp_path, summary_max_segment_length=120, summary_parallel=1)
    n = len(split_text(LONG_TEXT, 120))
    wordy = "A long partial summary that keeps many details of the part it summarises. " * 4

    def reply(messages):
        return wordy if user_prompt(messages).startswith(MAP_PROMPT) else "combined"

    llm = ScriptedLLM([reply] * (3 * n))
    assert tool.run(LONG_TEXT, context=ToolContext(llm=llm)) == "combined"
    combines = [user_prompt(r) for r in llm.requests[n:]]
    assert len(combines) > 1 and all(p.startswith(COMBINE_PROMPT) for p in combines)  # an extra round
    assert len(combines) - 1 <= n // 2  # groups of at least two partial summaries
    assert all(p.count(wordy.strip()) >= 2 for p in combines[:-1])
    assert "PART 1:\ncombined" in combines[-1] and wordy.strip() not in combines[-1]


def test_max_segments_caps_the_calls_and_says_so(tmp_path):
    tool = make(tmp_path, summary_max_segment_length=120, summary_max_segments=2)
    llm = ScriptedLLM(["s1", "s2", "final"])
    out = tool.run(LONG_TEXT, context=ToolContext(llm=llm))
    assert out.startswith("final\n\n(the text was longer than 2 segments of 120 tokens; only the first 2")
    assert llm.calls == 3


def test_file_input_inside_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "notes.txt").write_text("Meeting notes: we ship on Friday.", encoding="utf-8")
    llm = ScriptedLLM(["Shipping Friday.", "Again."])
    out = make(tmp_path).run("docs/notes.txt", context=ToolContext(llm=llm))
    assert out == "Summary of docs/notes.txt:\nShipping Friday."
    assert "Meeting notes: we ship on Friday." in user_prompt(llm.requests[0])
    out = make(tmp_path).run(str(ws / "docs" / "notes.txt"), context=ToolContext(llm=llm))  # absolute, inside
    assert out.startswith("Summary of docs/notes.txt:")


def test_missing_and_binary_files(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    llm = ScriptedLLM([])
    with pytest.raises(ToolInputError, match="no file 'report.md' in the workspace"):
        make(tmp_path).run("report.md", context=ToolContext(llm=llm))
    with pytest.raises(ToolInputError, match="not a text file"):
        make(tmp_path).run("blob.bin", context=ToolContext(llm=llm))
    assert llm.calls == 0


@pytest.mark.parametrize("path", ["../secret.txt", "docs/../../secret.txt", "{tmp}/secret.txt", "/etc/passwd",
                                  "link/secret.txt", "~/secret.txt"])
def test_paths_outside_the_workspace_are_refused(tmp_path, monkeypatch, path):
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
    os.symlink(tmp_path, ws / "link")  # a link inside the workspace that points outside
    monkeypatch.setenv("HOME", str(tmp_path))
    llm = ScriptedLLM([])
    with pytest.raises(ToolInputError, match="refused: .* is outside the workspace"):
        make(tmp_path).run(path.replace("{tmp}", str(tmp_path)), context=ToolContext(llm=llm))
    assert llm.calls == 0


def test_url_input_is_read_as_url_get_shows_it(tmp_path, service_server):
    service_server.route("/cats.html", "<html><head><title>Cats</title><script>steal()</script></head>"
                                       "<body><h1>Cats</h1><p>Cats are great.</p></body></html>",
                         content_type="text/html; charset=utf-8")
    url = service_server.url + "/cats.html"
    llm = ScriptedLLM(["Cats are great."])
    out = make(tmp_path, url_get_allow_private=True).run(url, context=ToolContext(llm=llm))
    assert out == f"Summary of {url}:\nCats are great."
    prompt = user_prompt(llm.requests[0])
    assert f"URL: {url}\nTitle: Cats\n\n# Cats\n\nCats are great." in prompt and "steal" not in prompt


def test_url_input_goes_through_the_proxy_setting(tmp_path, service_server, monkeypatch):
    real_getaddrinfo = socket.getaddrinfo

    def resolve(host, *args, **kwargs):  # a public name, without asking a resolver
        if host == "public.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80))]
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    service_server.route("/doc", "The document, through the proxy.")
    llm = ScriptedLLM(["Through the proxy."])
    out = make(tmp_path, proxy=service_server.url).run("http://public.example/doc", context=ToolContext(llm=llm))
    assert out == "Summary of http://public.example/doc:\nThrough the proxy."
    assert service_server.requests[0]["headers"]["host"] == "public.example"
    assert "The document, through the proxy." in user_prompt(llm.requests[0])


def test_url_failures_become_observations_and_are_not_summarised(tmp_path, service_server):
    service_server.route("/missing", "gone", status=404)
    service_server.route("/photo.png", b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png")
    llm = ScriptedLLM([])
    tool = make(tmp_path, url_get_allow_private=True)
    with pytest.raises(ToolExecutionError, match=r"^could not fetch http://127\.0\.0\.1:\d+/missing: HTTP 404 Not "
                                                 r"Found$"):
        tool.run(service_server.url + "/missing", context=ToolContext(llm=llm))
    with pytest.raises(ToolExecutionError, match=r"/photo\.png: it is binary content \(image/png\), not a text page$"):
        tool.run(service_server.url + "/photo.png", context=ToolContext(llm=llm))
    with pytest.raises(ToolExecutionError, match=r"could not fetch .*: could not reach 127.0.0.1: connection refused"):
        tool.run(closed_port_url() + "/", context=ToolContext(llm=llm))
    with pytest.raises(ToolExecutionError, match=r"could not fetch .*: refused to fetch 127.0.0.1: loopback address"):
        make(tmp_path).run(service_server.url + "/missing", context=ToolContext(llm=llm))
    with pytest.raises(ToolExecutionError, match=r"setting 'url_get_timeout' must be > 0"):
        make(tmp_path, url_get_timeout=-1).run(service_server.url + "/missing", context=ToolContext(llm=llm))
    assert llm.calls == 0 and service_server.paths() == ["/missing", "/photo.png"]


def test_no_llm_gives_a_clear_observation(tmp_path):
    tool = make(tmp_path)  # the chatbot's kwargs: llm_api_key is empty
    with pytest.raises(ToolExecutionError) as info:
        tool.run("Some text to summarise.")
    message = str(info.value)
    assert "needs an LLM" in message and "LLM_API_KEY" in message and "LLM_API_BASE_URL" in message
    with pytest.raises(ToolInputError, match="needs text"):
        tool.run("   ", context=ToolContext(llm=ScriptedLLM([])))


def test_pure_mode_builds_its_llm_from_the_factory_kwargs(tmp_path, chat_server):
    chat_server.replies = ["Summary from the server."]
    tool = main_tool_register.build("summary", **chatbot_kwargs(
        llm_api_key="sk-summary-test", llm_api_base_url=chat_server.url, workspace_dir=str(tmp_path)))
    assert tool.run("Text for the server to summarise.") == "Summary from the server."
    body = chat_server.requests[0]["json"]
    assert body["model"] == "gpt-3.5-turbo"
    assert "Text for the server to summarise." in body["messages"][-1]["content"]
    assert "sk-summary-test" not in repr(tool)


def test_llm_failure_and_budget_become_observations(tmp_path):
    class Down:
        model_name = "down"

        def complete(self, messages, stop=None):
            raise LLMConnectionError("could not reach the LLM endpoint")

    with pytest.raises(ToolExecutionError, match="the LLM failed while summarising: could not reach"):
        make(tmp_path).run("text", context=ToolContext(llm=Down()))
    tool = make(tmp_path, summary_max_segment_length=120, summary_parallel=1)
    llm = ScriptedLLM(["s"] * 20)
    with pytest.raises(ToolExecutionError, match="stopped summarising: the budget of 2 LLM calls"):
        tool.run(LONG_TEXT, context=ToolContext(llm=llm, budget=Budget(max_llm_calls=2)))
    assert llm.calls == 2


def test_inside_a_run_the_engine_llm_summarises(tmp_path):
    from chatgpt_tool_hub.apps import AppFactory

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "report.txt").write_text("Quarterly revenue rose 12 percent.", encoding="utf-8")
    llm = ScriptedLLM([act("summary", "report.txt"), "Revenue up 12%.", answer("Revenue rose 12%.")])
    app = AppFactory().create_app(tools_list=["summary"], llm=llm, no_default=True, workspace_dir=str(ws))
    result = app.run("summarise report.txt")
    assert result.output == "Revenue rose 12%."
    assert result.steps[0].observation == "Summary of report.txt:\nRevenue up 12%."
    assert "Quarterly revenue rose 12 percent." in user_prompt(llm.requests[1])


def test_runnable_examples_in_the_services_guide(capsys):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "tools" / "services.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:] if b.startswith("# runnable")]
    assert blocks
    for code in blocks:
        exec(compile(code, "docs/tools/services.md", "exec"), {})
    assert "Cats sleep most of the day." in capsys.readouterr().out


def test_file_input_refuses_a_hard_link_to_a_file_outside(tmp_path):
    import os

    from chatgpt_tool_hub.errors import ToolInputError
    from chatgpt_tool_hub.testing import ScriptedLLM
    from chatgpt_tool_hub.tools.base import ToolContext
    from chatgpt_tool_hub.tools.plugins.summary import SummaryTool

    outside = tmp_path / "secret.txt"
    outside.write_text("the secret")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.link(outside, workspace / "innocent.txt")
    tool = SummaryTool.from_config(workspace_dir=str(workspace))
    llm = ScriptedLLM(["never"])
    with pytest.raises(ToolInputError):
        tool.run("innocent.txt", ToolContext(llm=llm))
    assert llm.calls == 0
