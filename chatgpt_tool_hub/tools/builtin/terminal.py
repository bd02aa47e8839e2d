"""The ``terminal`` tool: run one shell command in the workspace.

Dangerous (``dangerous = True``: the app's approver is asked before every call)
and never a default tool: a shell is the widest agency a model can get. The
command runs through :func:`~chatgpt_tool_hub.runtime.sandbox.run_sandboxed` with ``bash`` (or
``/bin/sh``) ``-c``: its whole process tree killed with ``SIGKILL`` at the wall
timeout, and after the command ends (background jobs end with it, also those
that left the process group with ``setsid``), stdin from ``/dev/null``, a
scrubbed environment without API keys, the workspace as working directory and
``HOME``, a private ``TMPDIR``, output cut to head + tail and stripped of ANSI
escape sequences.

``terminal_nsfc_filter`` ("not safe for computer", :mod:`._nsfc`) refuses
commands in well-known destructive families (``rm -rf /``, ``find / -delete``,
``mkfs``, ``dd of=/dev/...``, fork bombs, ``shutdown``, anything piped into a
shell, ``eval "$(...)"``, ``kill -9 -1``, writes to ``/etc``, ``sudo``...),
found by splitting the line into commands the way the shell does (wrappers,
groups, ``bash -c``, ``$(...)``). It is a tripwire against an LLM's mistakes,
**not a security boundary**: ``$(echo rm) -rf /``, variables or a script file
get around it.
The shell runs as the application's user; isolate the application (a
container, a VM, a low-privilege account) when the model is not trusted.

A run that is cancelled (``app.cancel``, a server client that went away: the
run's ``RunBudget`` in ``ToolContext.budget``) kills the command's whole tree
at once, from the cancelling thread: the call holds its child's ``Popen`` from
the moment it starts (``run_sandboxed(on_start=...)``), so the cancel hook
kills that tree directly, and a cancel that comes before the child started
kills it as it starts. The call then returns as soon as the command's output
and process have ended (no polling on the way).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any, Mapping

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ...runtime.nsfc import NSFC_RULES, nsfc_check
from ...runtime.sandbox import describe_signal, kill_child_tree, run_sandboxed, scrubbed_env, strip_control
from ...runtime.workspace import make_folder
from ..base import DEFAULT_CONTEXT, Tool

__all__ = ["TerminalTool", "nsfc_check", "NSFC_RULES"]


class TerminalTool(Tool):
    """Run a shell command in the workspace and return its output."""

    name = "terminal"
    description = (
        "Run a shell command on the local machine, in the workspace folder, and get its output. "
        "Input: one shell command line (pipes and && are fine). No interactive programs: stdin is empty. "
        "Long-running commands are stopped after a timeout."
    )
    parameters = None
    dangerous = True
    egress = "code"  # a command can open sockets (see untrusted_egress_code)
    needs_context = True

    def __init__(self, *, timeout: float = 20.0, max_output_chars: int = 8000, return_err_output: bool = True,
                 nsfc_filter: bool = True, workspace_dir: str | os.PathLike = "./workspace", max_memory_mb: int = 0,
                 max_file_mb: int = 256):
        if timeout <= 0:
            raise ConfigError("setting 'terminal_timeout' must be > 0 seconds", key="terminal_timeout")
        if max_output_chars <= 0:
            raise ConfigError("setting 'terminal_max_output_chars' must be > 0", key="terminal_max_output_chars")
        self.timeout = float(timeout)
        self.max_output_chars = int(max_output_chars)
        self.return_err_output = bool(return_err_output)
        self.nsfc_filter = bool(nsfc_filter)
        self.max_memory_mb = int(max_memory_mb)  # 0: none (shells start programs that reserve much)
        self.max_file_mb = int(max_file_mb)  # RLIMIT_FSIZE; 0: none
        self.workspace = Path(workspace_dir).expanduser().resolve()
        make_folder(self.workspace)  # for an app: on first use
        self.shell = shutil.which("bash", path=scrubbed_env()["PATH"]) or "/bin/sh"

    @classmethod
    def from_context(cls, context: Any) -> "TerminalTool":
        """Build from configuration kwargs; unrelated keys and empty strings are ignored."""
        settings = context.settings
        return cls(
            timeout=settings.get("terminal_timeout", 20.0),
            max_output_chars=settings.get("terminal_max_output_chars", 8000),
            return_err_output=settings.get("terminal_return_err_output", True),
            nsfc_filter=settings.get("terminal_nsfc_filter", True),
            workspace_dir=context.workspace,
            max_memory_mb=settings.get("terminal_max_memory_mb", 0),
            max_file_mb=settings.get("max_file_mb", 256),
        )

    def run(self, tool_input: str | Mapping[str, Any] = "", context: Any = None) -> str:
        # {"command": ..., "reason": ...} from native tool calls: take the command
        if isinstance(tool_input, Mapping) and len(tool_input) > 1:
            command = tool_input.get("command", tool_input.get("input"))
            if isinstance(command, str):
                tool_input = command
        return super().run(tool_input, context)

    def _run(self, text: str, context: Any = DEFAULT_CONTEXT) -> str:
        command = extract_command(text)
        if not command:
            raise ToolInputError("the terminal tool needs a shell command as its input, e.g. ls -la")
        if "\x00" in command:
            raise ToolInputError("the command contains a NUL byte; send plain text")
        if self.nsfc_filter:
            reason = nsfc_check(command)
            if reason:
                raise ToolExecutionError(
                    f"the command was refused by terminal_nsfc_filter: it looks like {reason}. "
                    "Do not try to get around the filter; use a safer command limited to the workspace, "
                    "or tell the user what you wanted to run and why.")
        self.workspace.mkdir(parents=True, exist_ok=True)
        budget = getattr(context, "budget", None)
        if getattr(budget, "cancelled", False):
            raise ToolExecutionError("the run was cancelled; the command was not run")
        call = _Call()
        on_cancel = getattr(budget, "on_cancel", None)
        remove = on_cancel(call.kill) if callable(on_cancel) else None
        try:
            result = run_sandboxed([self.shell, "-c", command], cwd=self.workspace, timeout=self.timeout,
                                   max_memory_mb=self.max_memory_mb, max_output_chars=self.max_output_chars,
                                   env=scrubbed_env(home=self.workspace), merge_stderr=self.return_err_output,
                                   max_file_mb=self.max_file_mb, on_start=call.started)
        finally:
            call.finish()
            if remove is not None:
                remove()
        output = strip_control(result.output).rstrip("\n")
        problem = self._problem(result.timed_out, result.returncode)
        if call.killed:
            problem = "Error: the run was cancelled while the command ran; the command and what it started were stopped"
        if problem:
            return f"{output}\n{problem}" if output.strip() else problem
        return output if output.strip() else "(no output)"

    def _problem(self, timed_out: bool, returncode: int | None) -> str | None:
        if timed_out:
            return f"Error: the command ran longer than {self.timeout:g} s and was stopped (terminal_timeout)"
        sig = describe_signal(returncode)
        if sig == "SIGXFSZ" or returncode == _SHELL_XFSZ:  # the shell reports a child it lost so as 128 + 25
            return (f"(killed by SIGXFSZ: a file grew past {self.max_file_mb} MiB, the largest one a command may "
                    f"write here (max_file_mb))")
        if sig:
            return f"(killed by {sig})"
        if returncode:
            return f"(exit status {returncode})"
        return None


_SHELL_XFSZ = 128 + int(getattr(signal, "SIGXFSZ", 25))


class _Call:
    """One command in flight; :meth:`kill` (the run's cancel hook, from any thread) ends its process tree."""

    def __init__(self) -> None:
        self.killed = False
        self._proc: subprocess.Popen | None = None
        self._done = False
        self._lock = threading.Lock()

    def started(self, proc: subprocess.Popen) -> None:
        """The command's process runs (in the calling thread); cancelled already: it is killed at once."""
        with self._lock:
            self._proc = proc
            killed = self.killed
        if killed:
            kill_child_tree(proc)

    def kill(self) -> None:
        """Kill the command's tree now (from the cancelling thread); before it started: as it starts."""
        with self._lock:
            self.killed = True
            proc = None if self._done else self._proc
        if proc is not None:
            kill_child_tree(proc)

    def finish(self) -> None:
        with self._lock:
            self._done = True
            self._proc = None


def extract_command(text: str) -> str:
    """The command in ``text``: without a Markdown fence, wrapping backticks or a ``$ `` prompt."""
    command = text.strip()
    fenced = re.fullmatch(r"```[ \t]*(?:bash|sh|shell|console|zsh|terminal)?[ \t]*\n?(.*?)\n?[ \t]*```", command,
                          re.S | re.I)
    if fenced:
        command = fenced.group(1).strip()
    elif len(command) > 1 and command[0] == command[-1] == "`" and "\n" not in command:
        command = command.strip("`").strip()
    if command.startswith("$ "):
        command = command[2:].lstrip()
    return command
