"""Import time of the package (goal: ``import chatgpt_tool_hub`` under 0.3 s, no torch).

Each figure is the median wall time of fresh interpreters, minus the time of
an interpreter that imports nothing.

    python benchmarks/import_time.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 7
STATEMENTS = {
    "import chatgpt_tool_hub": "import chatgpt_tool_hub",
    "from chatgpt_tool_hub.apps import AppFactory": "from chatgpt_tool_hub.apps import AppFactory",
    "from chatgpt_tool_hub.engine.parser import parse_output": "from chatgpt_tool_hub.engine.parser import parse_output",
    "create_app + list tools (no LLM call)": (
        "from chatgpt_tool_hub.apps import AppFactory\n"
        "from chatgpt_tool_hub.testing import ScriptedLLM\n"
        "AppFactory().create_app(llm=ScriptedLLM([]))"),
}
HEAVY = ("torch", "transformers", "openai", "tiktoken", "rich")


def wall(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def main() -> int:
    baseline = statistics.median(wall("pass") for _ in range(RUNS))
    print(f"interpreter start-up: {baseline * 1000:.0f} ms (subtracted below)")
    for label, code in STATEMENTS.items():
        seconds = statistics.median(wall(code) for _ in range(RUNS)) - baseline
        probe = code + "\nimport sys\nprint(','.join(m for m in %r if m in sys.modules))" % (HEAVY,)
        loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        heavy = loaded.stdout.strip() or "none"
        print(f"{label:<58} {seconds * 1000:7.1f} ms   heavy modules loaded: {heavy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
