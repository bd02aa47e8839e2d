"""``tool-hub demo``: an offline, clearly labelled demo.

A scripted controller (``ScriptedLLM``) plays the LLM; the tools are real. It
shows a tool call, recovery from a malformed reply, and session memory,
without a network or a key.
"""

from __future__ import annotations

import re
import tempfile
from typing import Any

from .apps import AppFactory
from .testing import ScriptedLLM

_PRIMES_CODE = """\
limit = 10_000
sieve = bytearray([1]) * limit
sieve[0:2] = b"\\x00\\x00"
for i in range(2, int(limit ** 0.5) + 1):
    if sieve[i]:
        sieve[i * i::i] = bytearray(len(sieve[i * i::i]))
primes = [i for i, flag in enumerate(sieve) if flag]
print(len(primes), sum(primes))"""

_SAVE_CODE = """\
import os
with open("primes_summary.txt", "w") as f:
    f.write("primes below 10000: {count}, sum {total}\\n")
os.path.getsize("primes_summary.txt")"""


def _last_observation(messages: list[dict]) -> str:
    for message in reversed(messages):
        if message["role"] == "user" and message["content"].startswith("Observation:"):
            return message["content"][len("Observation:"):].strip()
    return ""


def _answer_primes(messages: list[dict]) -> str:
    numbers = re.findall(r"\d+", _last_observation(messages))
    count, total = (numbers + ["?", "?"])[:2]
    return (f"Thought: Do I need to use a tool? No\nAI: There are {count} primes below 10,000 "
            f"and their sum is {total} (computed with the python tool).")


def _save_request(messages: list[dict]) -> str:
    history = " ".join(m["content"] for m in messages if m["role"] == "assistant")
    match = re.search(r"There are (\d+) primes below 10,000 and their sum is (\d+)", history)
    count, total = match.groups() if match else ("?", "?")
    code = _SAVE_CODE.format(count=count, total=total)
    # deliberately messy markers: bold, full-width colon, fenced input
    return f"**Thought:** I remember the result; save it.\nAction：python\nAction Input:\n```python\n{code}\n```"


def _answer_saved(messages: list[dict]) -> str:
    size = _last_observation(messages)
    return f"Thought: Do I need to use a tool? No\nAI: Saved to primes_summary.txt ({size} bytes) in the workspace."


def demo_script() -> list[Any]:
    return [
        f"Thought: Do I need to use a tool? Yes\nAction: python\nAction Input:\n{_PRIMES_CODE}",
        _answer_primes,
        "I will save it now.\nAction: python",  # malformed: no Action Input; the engine asks again
        _save_request,
        _answer_saved,
    ]


QUESTIONS = [
    "How many prime numbers are there below 10,000, and what is their sum?",
    "Save that result to a file and tell me how big the file is.",
]


def run_demo(console, workspace: str | None = None) -> int:
    from rich.panel import Panel

    from .console import EventView

    console.print(Panel(
        "OFFLINE DEMO: the LLM is a scripted controller (chatgpt_tool_hub.testing.ScriptedLLM) that replays\n"
        "prepared replies; the python tool really runs. Configure a real model to use tool-hub for real.",
        border_style="bold red"))
    with tempfile.TemporaryDirectory(prefix="tool-hub-demo-") as tmp:
        folder = workspace or tmp
        app = AppFactory().create_app(tools_list=["python"], llm=ScriptedLLM(demo_script()), no_default=True,
                                      workspace_dir=folder, think_depth=3)
        view = EventView(console, verbose=True)
        try:
            for question in QUESTIONS:
                console.print(f"\n[bold]you>[/] {question}")
                for event in app.stream(question):
                    view(event)
        finally:
            view.close()
            app.close()
        where = folder if workspace else f"{folder} (temporary, removed now; keep files with --workspace DIR)"
        console.print(f"\nworkspace used: {where}")
    return 0
