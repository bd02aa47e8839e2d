"""The ``terminal`` tool: run one shell command in the workspace.

Dangerous (``dangerous = True``: the app's approver is asked before every call)
and never a default tool: a shell is the widest agency a model can get. The
command runs through :func:`._sandbox.run_sandboxed` with ``bash`` (or
``/bin/sh``) ``-c``: its whole process tree killed with ``SIGKILL`` at the wall
timeout, and after the command ends (background jobs end with it, also those
that left the process group with ``setsid``), stdin from ``/dev/null``, a
scrubbed environment without API keys, the workspace as working directory and
``HOME``, a private ``TMPDIR``, output cut to head + tail and stripped of ANSI
escape sequences.

``terminal_nsfc_filter`` ("not safe for computer") refuses commands that match
well-known destructive patterns (``rm -rf /``, ``find / -delete``, ``mkfs``,
``dd of=/dev/...``, fork bombs, ``shutdown``, anything piped into a shell,
``eval "$(...)"``, ``kill -9 -1``, writes to ``/etc``, ``sudo``...).
It is defence in depth against an LLM's mistakes, **not a security boundary**:
``$(echo rm) -rf /``, variables or a script file get around any pattern list.
The shell runs as the application's user; isolate the application (a
container, a VM, a low-privilege account) when the model is not trusted.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ..base import Tool
from ._sandbox import describe_signal, run_sandboxed, scrubbed_env, strip_control

__all__ = ["TerminalTool", "nsfc_check", "NSFC_RULES"]

# Where a command starts: line start, after ; & | ( ` $( or "sh -c", or a wrapper such as sudo/env/xargs.
_WRAPPERS = r"(?:(?:sudo|doas|env|exec|nohup|command|builtin|time|nice|xargs|busybox)\s+(?:-\S+\s+)*)*"
_SHELL = r"(?:\S*/)?(?:ba|z|da|k|c|tc|fi)?sh"
_CMD = r"(?:^|[;&|(`\n]|\$\(|\b(?:ba|z|da|k)?sh\s+(?:-\w+\s+)*-\w*c\w*\s+)\s*" + _WRAPPERS + r"(?:\S*/)?"
_END = r"(?=$|[\s;&|)`])"
_SYSTEM = r"(?:bin|boot|dev|etc|home|lib\w*|opt|proc|root|sbin|srv|sys|usr|var)"
_ROOTISH = r"(?:/+\*?|/+" + _SYSTEM + r"/*\*?|~/?\*?|\$\{?HOME\}?/?\*?)"
_ARGS = r"\s+(?:\S+\s+)*?"  # whitespace and any arguments before the next part
_RECURSIVE = r"(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)"
_PIPE_TO = r"\b(?:curl|wget|fetch)\b[^;&\n]*\|\s*(?:sudo\s+)?(?:\S*/)?"
_ETC = r"/etc(?:/|$|\s)"
_ETC_WRITERS = r"(?:tee|touch|truncate|rm|rmdir|unlink|shred|chmod|chown|chgrp|mkdir|sed\s+(?:\S+\s+)*?-i\S*)"
_RM_ROOT = "recursive delete of the root, home or a system folder"
_DISKS = r"/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|mapper/|loop)"

# (reason, pattern) pairs; matched against the command with quotes and backslashes removed.
NSFC_RULES: list[tuple[str, re.Pattern[str]]] = [(reason, re.compile(pattern)) for reason, pattern in (
    (_RM_ROOT, _CMD + r"rm" + _ARGS + _RECURSIVE + _ARGS + _ROOTISH + _END),
    (_RM_ROOT, _CMD + r"rm" + _ARGS + _ROOTISH + _ARGS + _RECURSIVE + _END),
    ("rm with --no-preserve-root", r"--no-preserve-root"),
    ("formatting a file system (mkfs)", _CMD + r"mkfs(?:\.\w+)?" + _END),
    ("writing a raw device with dd", r"\bdd\b[^;&|\n]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)"),
    ("a fork bomb", r"(\w+|:)\s*\(\)\s*\{[^}]*\1\s*\|\s*\1\s*&"),
    ("shutting down or rebooting the machine", _CMD + r"(?:shutdown|reboot|halt|poweroff)" + _END),
    ("shutting down or rebooting the machine",
     _CMD + r"(?:systemctl\s+(?:poweroff|reboot|halt|kexec)|init\s+[06])" + _END),
    ("a recursive permission change of the root or a system folder",
     _CMD + r"ch(?:mod|own|grp)" + _ARGS + r"(?:-[a-zA-Z]*R[a-zA-Z]*|--recursive)" + _ARGS + _ROOTISH + _END),
    ("writing to a disk device", r">\s*" + _DISKS),
    ("wiping a disk device", _CMD + r"(?:shred|wipefs|blkdiscard|sgdisk|sfdisk|fdisk|parted|mkswap)\b[^;&|\n]*\s"
     + _DISKS),
    ("piping a download into a shell", _PIPE_TO + r"(?:ba|z|da|k|c|tc|fi)?sh" + _END),
    ("piping a download into an interpreter", _PIPE_TO + r"(?:python\d*|perl|ruby|node)" + _END),
    ("running a downloaded script", r"\b(?:ba|z|da|k)?sh\b[^;&\n]*(?:<\(|\$\()\s*(?:curl|wget)\b"),
    ("writing to /etc", r">\s*" + _ETC),
    ("writing to /etc", _CMD + _ETC_WRITERS + _ARGS + _ETC),
    ("writing to /etc", _CMD + r"(?:cp|mv|install|ln|rsync)\s+[^;&|\n]*\s/etc(?:/\S*)?\s*(?:$|[;&|\n])"),
    ("writing to /etc", r"\bdd\b[^;&|\n]*\bof=/etc/"),
    ("running as another user (sudo/su)", _CMD + r"(?:sudo|su|doas|pkexec|runuser)" + _END),
    ("piping text into a shell", r"\|\s*" + _WRAPPERS + _SHELL + _END),
    ("running generated or decoded text (eval, sh -c $(...))",
     r"(?:" + _CMD + r"eval\s+|\b(?:ba|z|da|k)?sh\s+(?:-\w+\s+)*)[^;&|\n]*?(?:\$\(|`)"),
    (_RM_ROOT, _CMD + r"find\s+(?:-\S+\s+)*" + _ROOTISH
     + r"\s[^;&|\n]*?(?:-delete|-exec\s+(?:\S*/)?(?:rm|shred|unlink))\b"),
    (_RM_ROOT, _CMD + r"cd\s+" + _ROOTISH + r"\s*(?:&&|;|\n)\s*(?:\S*/)?rm" + _ARGS + _RECURSIVE + _ARGS
     + r"(?:\./)?\*" + _END),
    ("killing every process (kill -1) or init (kill 1)",
     _CMD + r"kill\s+(?:-\S+\s+(?:[A-Za-z]+\s+)?)*(?:--\s+)?-?1(?=\s*(?:$|[;&|)\n]))"),
)]
_ABSOLUTE = re.compile(r"(?<![^\s;&|(`=])/[^\s;&|)`]*")  # an absolute path where an argument starts


def _normpath(path: str) -> str:
    """``/usr/../`` and ``/.`` as the root they are (``/*`` kept); other paths unchanged."""
    if "/." not in path:
        return path
    star = "/*" if path.endswith("/*") else ""
    return posixpath.normpath(path[: -2] if star else path).rstrip("/") + star or "/"


def nsfc_check(command: str) -> str | None:
    """Why ``command`` is refused by the nsfc filter, or ``None`` when no rule matches."""
    text = re.sub(r"\\\n", " ", command)
    text = re.sub(r"[\"'\\]", "", text)
    text = re.sub(r"[ \t]+", " ", text)
    normalized = _ABSOLUTE.sub(lambda m: _normpath(m.group()), text)  # "/usr/../" and "/." are the root
    for candidate in dict.fromkeys((text, normalized)):
        for reason, pattern in NSFC_RULES:
            if pattern.search(candidate):
                return reason
    return None



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

    def __init__(self, *, timeout: float = 20.0, max_output_chars: int = 8000, return_err_output: bool = True,
                 nsfc_filter: bool = True, workspace_dir: str | os.PathLike = "./workspace", max_memory_mb: int = 0):
        if timeout <= 0:
            raise ConfigError("setting 'terminal_timeout' must be > 0 seconds", key="terminal_timeout")
        if max_output_chars <= 0:
            raise ConfigError("setting 'terminal_max_output_chars' must be > 0", key="terminal_max_output_chars")
        self.timeout = float(timeout)
        self.max_output_chars = int(max_output_chars)
        self.return_err_output = bool(return_err_output)
        self.nsfc_filter = bool(nsfc_filter)
        self.max_memory_mb = int(max_memory_mb)  # 0: none (shells start programs that reserve much)
        self.workspace = Path(workspace_dir).expanduser().resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
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
        )

    def run(self, tool_input: str | Mapping[str, Any] = "", context: Any = None) -> str:
        # {"command": ..., "reason": ...} from native tool calls: take the command
        if isinstance(tool_input, Mapping) and len(tool_input) > 1:
            command = tool_input.get("command", tool_input.get("input"))
            if isinstance(command, str):
                tool_input = command
        return super().run(tool_input, context)

    def _run(self, text: str) -> str:
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
        result = run_sandboxed([self.shell, "-c", command], cwd=self.workspace, timeout=self.timeout,
                               max_memory_mb=self.max_memory_mb, max_output_chars=self.max_output_chars,
                               env=scrubbed_env(home=self.workspace), merge_stderr=self.return_err_output)
        output = strip_control(result.output).rstrip("\n")
        problem = self._problem(result.timed_out, result.returncode)
        if problem:
            return f"{output}\n{problem}" if output.strip() else problem
        return output if output.strip() else "(no output)"

    def _problem(self, timed_out: bool, returncode: int | None) -> str | None:
        if timed_out:
            return f"Error: the command ran longer than {self.timeout:g} s and was stopped (terminal_timeout)"
        sig = describe_signal(returncode)
        if sig:
            return f"(killed by {sig})"
        if returncode:
            return f"(exit status {returncode})"
        return None


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
