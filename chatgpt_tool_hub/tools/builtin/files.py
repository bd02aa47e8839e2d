"""The file tools: ``read-file``, ``write-file`` (dangerous) and ``list-dir``.

All three are confined to ``workspace_dir`` (default ``./workspace``, created
when missing) by :class:`._workspace.Workspace`: relative paths, or absolute
ones inside the workspace; no ``..``, ``~``, NUL bytes, percent-encoded
traversal or symbolic links that lead outside; regular files only; never the
app's configuration files (``protected_paths``, the app context's
``config_sources``: they hold keys, and what is written there configures the
next app),
nor ``.env`` / ``config.json`` at the workspace root. Every
refusal and failure is a ``ToolInputError`` / ``ToolExecutionError`` whose
message tells the model what to do instead, so inside a run it becomes an
observation and the run goes on.

The confinement is for these tools only: ``python`` and ``terminal`` can reach
any file the application's user can (see docs/security.md).
"""

from __future__ import annotations

import codecs
import os
from typing import Any, Sequence

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ...runtime.workspace import Workspace, printable
from ..base import Tool
from ..context import AppContext

__all__ = ["ReadFileTool", "WriteFileTool", "ListDirTool"]

_PATH_HELP = "path relative to the workspace folder, e.g. notes.txt or data/report.csv"
_BINARY_SNIFF = 8192


class _WorkspaceTool(Tool):
    """A tool that works on files inside one workspace folder.

    ``protected_paths``: the absolute paths of the app's configuration sources
    (they need not exist), which the tool refuses to read or write.
    """

    def __init__(self, *, workspace_dir: str | os.PathLike = "./workspace",
                 protected_paths: Sequence[str | os.PathLike] = ()):
        self.workspace = Workspace(workspace_dir, protected_paths)

    @property
    def root(self) -> str:
        return self.workspace.root

    def close(self) -> None:
        """Close the workspace folder's descriptor; a later call reopens it."""
        self.workspace.close()

    def _failed(self, exc: OSError, shown: str) -> ToolExecutionError:
        reason = exc.strerror or type(exc).__name__
        return ToolExecutionError(f"could not use '{shown}': {reason}")


def _positive(key: str, value: int) -> int:
    if value <= 0:
        raise ConfigError(f"setting '{key}' must be > 0", key=key)
    return int(value)


class ReadFileTool(_WorkspaceTool):
    """Read a text file inside the workspace (UTF-8, bad bytes replaced; at most ``max_bytes``)."""

    name = "read-file"
    description = ("Read a text file inside the workspace and return its content. "
                   "Input: the file's path relative to the workspace, e.g. notes.txt.")
    parameters = {"type": "object", "properties": {"path": {"type": "string", "description": _PATH_HELP}},
                  "required": ["path"]}

    def __init__(self, *, workspace_dir: str | os.PathLike = "./workspace", max_bytes: int = 100_000,
                 protected_paths: Sequence[str | os.PathLike] = ()):
        super().__init__(workspace_dir=workspace_dir, protected_paths=protected_paths)
        self.max_bytes = _positive("read_file_max_bytes", max_bytes)

    @classmethod
    def from_context(cls, context: AppContext) -> "ReadFileTool":
        """Build for an app: its workspace, and its configuration files as the protected paths."""
        return cls(workspace_dir=context.workspace, max_bytes=context.settings.get("read_file_max_bytes", 100_000),
                   protected_paths=context.config_sources)

    def _run(self, path: str) -> str:
        if not str(path).strip():
            raise ToolInputError(f"read-file needs a file path as its input: a {_PATH_HELP}.")
        shown, parts = self.workspace.resolve(path)
        try:
            fd = self.workspace.open_file(parts, shown)
        except FileNotFoundError:
            raise ToolExecutionError(f"there is no file '{shown}' in the workspace; list-dir shows what is "
                                     f"there.") from None
        except OSError as exc:
            raise self._failed(exc, shown) from None
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(self.max_bytes + 1)
        return self._render(shown, data, size)

    def _render(self, shown: str, data: bytes, size: int) -> str:
        if not data:
            return f"(the file '{shown}' is empty)"
        if b"\x00" in data[:_BINARY_SNIFF]:
            return (f"'{shown}' is a binary file ({size} bytes); read-file shows text only. "
                    f"Use the python tool to inspect binary data.")
        truncated = len(data) > self.max_bytes
        text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data[: self.max_bytes],
                                                                               final=not truncated)
        if truncated:
            text += (f"\n\n[read-file: showed the first {self.max_bytes} of {max(size, len(data))} bytes "
                     f"(read_file_max_bytes); use the python tool to read other parts]")
        return text


class WriteFileTool(_WorkspaceTool):
    """Write (or append) text to a file inside the workspace, creating parent folders."""

    name = "write-file"
    description = ("Write text to a file inside the workspace (parent folders are created). Input: a JSON "
                   'object {"path": "notes.txt", "content": "text", "append": false}; append adds to the end.')
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": _PATH_HELP},
            "content": {"type": "string", "description": "the text to write (UTF-8)"},
            "append": {"type": "boolean", "description": "add to the end instead of replacing", "default": False},
        },
        "required": ["path", "content"],
    }
    dangerous = True

    def __init__(self, *, workspace_dir: str | os.PathLike = "./workspace", max_bytes: int = 1_000_000,
                 protected_paths: Sequence[str | os.PathLike] = ()):
        super().__init__(workspace_dir=workspace_dir, protected_paths=protected_paths)
        self.max_bytes = _positive("write_file_max_bytes", max_bytes)

    @classmethod
    def from_context(cls, context: AppContext) -> "WriteFileTool":
        """Build for an app: its workspace, and its configuration files as the protected paths."""
        return cls(workspace_dir=context.workspace, max_bytes=context.settings.get("write_file_max_bytes", 1_000_000),
                   protected_paths=context.config_sources)

    def _run(self, path: str, content: str, append: bool = False, **_ignored: Any) -> str:
        if not path.strip():
            raise ToolInputError(f'write-file needs a "path": a {_PATH_HELP}.')
        data = content.encode("utf-8", errors="replace")
        if len(data) > self.max_bytes:
            raise ToolInputError(f"the content is {len(data)} bytes; write-file writes at most {self.max_bytes} "
                                 f"bytes at a time (write_file_max_bytes). Write it in smaller parts with "
                                 f'"append": true.')
        shown, parts = self.workspace.resolve(path)
        try:
            fd = self.workspace.open_file(parts, shown, write=True, append=bool(append))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            raise self._failed(exc, shown) from None
        verb = "Appended" if append else "Wrote"
        return f"{verb} {len(data)} bytes to '{shown}' in the workspace."


class ListDirTool(_WorkspaceTool):
    """List a folder inside the workspace: type, size and name of each entry, sorted."""

    name = "list-dir"
    description = ("List the files and folders in a folder inside the workspace. Input: the folder's path "
                   "relative to the workspace; empty for the workspace itself.")
    parameters = {"type": "object",
                  "properties": {"path": {"type": "string", "description": "folder path relative to the "
                                          "workspace; empty for the workspace itself", "default": ""}},
                  "required": []}

    def __init__(self, *, workspace_dir: str | os.PathLike = "./workspace", max_entries: int = 200,
                 protected_paths: Sequence[str | os.PathLike] = ()):
        super().__init__(workspace_dir=workspace_dir, protected_paths=protected_paths)
        self.max_entries = _positive("list_dir_max_entries", max_entries)

    @classmethod
    def from_context(cls, context: AppContext) -> "ListDirTool":
        """Build for an app: its workspace, and its configuration files as the protected paths."""
        return cls(workspace_dir=context.workspace, max_entries=context.settings.get("list_dir_max_entries", 200),
                   protected_paths=context.config_sources)

    def _run(self, path: str = "") -> str:
        shown, parts = self.workspace.resolve(str(path))
        try:
            entries = self.workspace.entries(parts, shown)
        except NotADirectoryError:
            raise ToolInputError(f"'{shown}' is a file, not a folder; use read-file to read it.") from None
        except OSError as exc:
            raise self._failed(exc, shown) from None
        return self._render(shown, entries)

    def _render(self, shown: str, entries: list[tuple[str, str, int]]) -> str:
        where = "the workspace" if shown == "." else f"'{shown}'"
        if not entries:
            return f"{where} is empty."
        entries.sort(key=lambda e: (e[1] != "dir", e[0]))
        count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
        lines = [f"{where} holds {count} (type, size in bytes, name):"]
        for name, kind, size in entries[: self.max_entries]:
            label = printable(name) + ("/" if kind == "dir" else "")
            lines.append(f"{kind:<5} {size if kind == 'file' else '-':>10}  {label}")
        if len(entries) > self.max_entries:
            lines.append(f"... and {len(entries) - self.max_entries} more entries (list_dir_max_entries)")
        return "\n".join(lines)
