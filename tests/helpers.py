"""Small tools and reply builders shared by the tests."""

from __future__ import annotations

from chatgpt_tool_hub.tools import Tool, tool


def act(tool_name: str, tool_input: str, thought: str = "Do I need to use a tool? Yes") -> str:
    return f"Thought: {thought}\nAction: {tool_name}\nAction Input: {tool_input}"


def answer(text: str) -> str:
    return f"Thought: Do I need to use a tool? No\nAI: {text}"


@tool(name="echo", description="Echo the input text back.")
def echo(text: str) -> str:
    return f"echo: {text}"


class CountingTool(Tool):
    """A string tool that counts its calls and can be told to fail."""

    name = "counter"
    description = "Counts calls."

    def __init__(self, fail: bool = False, output: str | None = None, dangerous: bool = False):
        self.calls: list[str] = []
        self.fail = fail
        self.output = output
        self.dangerous = dangerous

    def _run(self, text: str) -> str:
        self.calls.append(text)
        if self.fail:
            raise RuntimeError("boom")
        return self.output if self.output is not None else f"count={len(self.calls)}"


def last_user(messages: list[dict]) -> str:
    return [m for m in messages if m["role"] == "user"][-1]["content"]


def run_events(engine, query: str, **kw):
    """All events of ``engine.iter_run`` and its result."""
    gen = engine.iter_run(query, **kw)
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie nobody reaped yet counts as gone)."""
    import os
    from pathlib import Path

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def wait_gone(pid: int, seconds: float = 30.0) -> bool:
    """Poll until ``pid`` no longer runs (see ``process_gone``), for at most ``seconds`` (generous: a busy
    machine may take a while to end a killed process, and a process that is gone returns at once)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.05)
    return process_gone(pid)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.02) -> bool:
    """Poll ``predicate()`` until it is true, for at most ``timeout`` seconds; its last value.

    Tests wait for a condition rather than sleep a fixed time and hope: on a quiet machine this
    returns at once, on a busy one it waits as long as needed (the deadline is generous because
    it is only reached when the test fails anyway)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def read_http_request(rfile) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 request from a raw socket stream: ``(head, body)``, or None when the client closed the
    connection (the raw test servers that need control over their connections use it)."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = rfile.read(1)
        if not byte:
            return None
        head += byte
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head, rfile.read(length)
