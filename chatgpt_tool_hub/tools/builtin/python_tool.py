"""The ``python`` tool: run a piece of Python code in a separate process.

Each call starts a fresh interpreter (``python -I``, nothing is kept between
calls except files in the workspace) through :func:`._sandbox.run_sandboxed`:
own process group, wall timeout that kills the group, ``RLIMIT_AS`` and
``RLIMIT_CPU``, a scrubbed environment without API keys, the workspace as
working directory and ``HOME``. The code reaches the worker through stdin.
REPL semantics: the value of a last expression is printed with ``repr``.

**Not a security boundary.** The code runs as the same user as the
application: it can read and write that user's files, use the network and, with
some effort, escape the limits (see ``_sandbox``'s docstring). The limits stop
accidents, not a determined attacker; run the application in a container or a
low-privilege account when the LLM (or whoever steers it) is not trusted.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Mapping

from ...config import get_typed
from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ..base import Tool
from ._sandbox import describe_signal, run_sandboxed, scrubbed_env

__all__ = ["PythonTool", "extract_code"]

_WORKER = str(Path(__file__).with_name("_python_worker.py"))

# Set in the child on top of the scrubbed environment: keep numeric libraries
# from reserving per-core threads and arenas that the address-space limit would
# refuse, and keep plotting off screen.
_CHILD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
    "MPLBACKEND": "Agg",
}

_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py|python-repl|pycon)?[ \t]*\r?\n(.*?)^[ \t]*```[ \t]*$",
                    re.S | re.M | re.I)


class PythonTool(Tool):
    """Run Python code in a sandboxed child process and return what it printed."""

    name = "python"
    description = (
        "Run Python code for calculations, data processing and file work. Input: Python code. "
        "It runs in a fresh process each time (nothing is kept between calls except files); "
        "use print() to show results; the value of a last expression is shown too. "
        "Read and write files in the current working directory."
    )
    parameters = None

    def __init__(self, *, timeout: float = 30.0, max_memory_mb: int = 1024, max_output_chars: int = 8000,
                 workspace_dir: str | os.PathLike = "./workspace"):
        if timeout <= 0:
            raise ConfigError("setting 'python_timeout' must be > 0 seconds", key="python_timeout")
        if max_output_chars <= 0:
            raise ConfigError("setting 'python_max_output_chars' must be > 0", key="python_max_output_chars")
        self.timeout = float(timeout)
        self.max_memory_mb = int(max_memory_mb)  # <= 0: no address-space limit
        self.max_output_chars = int(max_output_chars)
        self.workspace = Path(workspace_dir).expanduser().resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_config(cls, **kwargs: Any) -> "PythonTool":
        """Build from configuration kwargs; unrelated keys and empty strings are ignored."""
        return cls(
            timeout=get_typed(kwargs, "python_timeout", 30.0),
            max_memory_mb=get_typed(kwargs, "python_max_memory_mb", 1024),
            max_output_chars=get_typed(kwargs, "python_max_output_chars", 8000),
            workspace_dir=get_typed(kwargs, "workspace_dir", "./workspace"),
        )

    def run(self, tool_input: str | Mapping[str, Any] = "", context: Any = None) -> str:
        # {"code": ..., "anything": ...} from native tool calls: take the code
        if isinstance(tool_input, Mapping) and len(tool_input) > 1:
            code = tool_input.get("code", tool_input.get("input"))
            if isinstance(code, str):
                tool_input = code
        return super().run(tool_input, context)

    def _run(self, text: str) -> str:
        code = extract_code(text)
        if not code.strip():
            raise ToolInputError("the python tool needs Python code as its input, e.g. print(2 ** 10)")
        if not sys.executable:
            raise ToolExecutionError("no Python interpreter found to run the code (sys.executable is empty)")
        self.workspace.mkdir(parents=True, exist_ok=True)
        result = run_sandboxed(
            [sys.executable, "-I", _WORKER],
            stdin=code,
            cwd=self.workspace,
            timeout=self.timeout,
            max_memory_mb=self.max_memory_mb,
            max_output_chars=self.max_output_chars,
            env=scrubbed_env(_CHILD_ENV, home=self.workspace),
        )
        output = result.output.rstrip("\n")
        problem = self._problem(result.timed_out, result.returncode)
        if problem:
            return f"{output}\n{problem}" if output.strip() else problem
        return output if output.strip() else "(no output)"

    def _problem(self, timed_out: bool, returncode: int | None) -> str | None:
        """A line saying why the process ended abnormally, or None."""
        if timed_out:
            return f"Error: the code ran longer than {self.timeout:g} s and was stopped (python_timeout)"
        sig = describe_signal(returncode)
        if sig == "SIGXCPU":
            return f"Error: the code used more than {self.timeout:g} s of CPU time and was stopped (python_timeout)"
        if sig == "SIGKILL":
            return (f"Error: the process was killed (SIGKILL), probably for using too much memory "
                    f"(python_max_memory_mb={self.max_memory_mb})")
        if sig:
            return f"Error: the process crashed ({sig})"
        if returncode not in (0, 1, None):
            return f"(exit status {returncode})"
        return None


def extract_code(text: str) -> str:
    """The Python code in ``text``: without Markdown fences or wrapping backticks, dedented."""
    code = text.strip("\r\n")
    stripped = code.strip()
    if stripped.startswith("```"):
        body = stripped[3:]
        first, _, rest = body.partition("\n")
        if re.fullmatch(r"[ \t]*(?:python3?|py|python-repl|pycon)?[ \t]*", first, re.I):
            body = rest  # else: ```print(1)``` on one line
        code = re.sub(r"\n?[ \t]*```[ \t]*$", "", body)
    elif len(stripped) > 1 and stripped[0] == stripped[-1] == "`" and "\n" not in stripped:
        code = stripped.strip("`")
    elif "```" in code and not _parses(code):  # prose around a fenced block
        blocks = _FENCE.findall(code)
        if blocks:
            code = "\n".join(blocks)
    if not _parses(code):
        dedented = textwrap.dedent(code)
        if dedented != code and _parses(dedented):
            code = dedented
    return code


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except Exception:  # SyntaxError, ValueError (null bytes), MemoryError, RecursionError
        return False
    return True
