"""Keep file paths inside the workspace: the shared part of the file tools.

A path from the model is checked as text first (no NUL byte or other control
character, no ``~``, no ``file:`` or other URI, no ``..`` component, nothing
that percent-decoding - once or several times - or Unicode compatibility
folding (fullwidth ``．．／``) turns into one of those, no percent-encoded bytes
that are not UTF-8 (the overlong ``%c0%ae``); ``\\`` counts as a separator),
then resolved with ``os.path.realpath`` and kept only when
``os.path.commonpath`` says it is inside the workspace. That refuses absolute
paths outside the workspace and symbolic links anywhere in the path that lead
outside it; links that stay inside are followed.

To narrow the gap between that check and the use (TOCTOU), files and folders
are then opened from the workspace root one component at a time with
``O_NOFOLLOW`` (``dir_fd``): the resolved path has no links, so meeting one
means the tree changed under us, and the call fails. Only regular files are
read or written (no devices, FIFOs or sockets), and only when they have no
other hard link (a hard link may be another name of a file outside). Where
``dir_fd`` or ``O_NOFOLLOW`` is missing (Windows) the resolved path is opened
directly.

The workspace folder is made (when missing) and opened once, with
``O_DIRECTORY|O_NOFOLLOW``: when the tool is built, or, for the tools
``create_app`` builds (:data:`DEFER_CREATION`), on the first call that opens
a file, so an app that fails to build or never touches a file leaves no
folder behind. Its path is resolved when the tool is built, and a folder that
resolves elsewhere by the time it is made (a symbolic link put in its place)
is refused. Every walk starts from (a duplicate of) that descriptor, so
replacing the folder by a symbolic link cannot redirect a call; each call also
compares the path's ``(st_dev, st_ino)`` with the folder's and fails ("the
workspace folder was replaced or moved") when they differ. ``close()`` (and
garbage collection) closes the descriptor; the next call reopens it and
insists on the same folder.

The app's configuration sources (``protected``: the ``config.json`` and
``.env`` the app was configured from: the app context's ``config_sources``) and,
by name, ``.env`` and ``config.json`` at the workspace root (an app started in
the workspace would read them) are neither read nor written: writing them
would let a model plant settings (``MCP_SERVERS`` commands, a base URL that
receives the API key) for the next app, and reading them puts the keys into the
conversation. Names are compared case-folded and without trailing dots or
spaces, in the folder identified by ``(st_dev, st_ino)``; an existing file is
also compared by identity, which catches hard links and links to it.

This confines the file tools, not the ``python`` or ``terminal`` tools, which
can reach any file the application's user can.
"""

from __future__ import annotations

import contextvars
import errno
import os
import re
import stat
import threading
import unicodedata
import weakref
from pathlib import Path
from typing import Iterable, NamedTuple
from urllib.parse import unquote

from ..errors import ToolExecutionError, ToolInputError

__all__ = ["Workspace", "printable", "CONFIG_NAMES", "DEFER_CREATION", "make_folder"]

# True while AppFactory.create_app builds an app's tools: their workspace folder is made on first use.
# A tool built alone (its constructor, from_config, pure mode) makes it at once, as it always did.
DEFER_CREATION: contextvars.ContextVar[bool] = contextvars.ContextVar("workspace_defer_creation", default=False)

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block the open
_SAFE_OPEN = bool(_O_NOFOLLOW and _O_DIRECTORY) and os.open in os.supports_dir_fd
# C0 and C1 control characters (newlines and escapes included) and the bidirectional overrides
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_URI = re.compile(r"^(?:file:|[a-z][a-z0-9+.-]*://)", re.I)
_HINT = "Use a path relative to the workspace, e.g. notes.txt or data/report.csv; list-dir shows what is there."
# the files an app started in a folder reads its configuration from (apps/settings.py: load_settings)
CONFIG_NAMES = ("config.json", ".env")
_REPLACED = ("the workspace folder was replaced or moved (its path is now missing, a symbolic link or another "
             "folder); the file tools keep to the folder they started with and never follow it elsewhere. Put the "
             "workspace folder back, or start the app again with workspace_dir naming the folder to use.")


def make_folder(path: str | os.PathLike) -> None:
    """Make a tool's workspace folder now, unless the tool is being built for an app (:data:`DEFER_CREATION`);
    the tool makes it again before each use either way."""
    if not DEFER_CREATION.get():
        Path(path).mkdir(parents=True, exist_ok=True)


class _Guard(NamedTuple):
    """The protected files as they are now: ``(dev, ino, folded name)`` of names, ``(dev, ino)`` of files."""

    names: set[tuple[int, int, str]]
    files: set[tuple[int, int]]


class Workspace:
    """The folder the file tools may use, and safe ways to open paths inside it."""

    def __init__(self, root: str | os.PathLike, protected: Iterable[str | os.PathLike] = ()):
        self._path = Path(root).expanduser()
        self.root = os.path.realpath(self._path)  # where the folder is (or will be made on first use)
        # the app's configuration sources; .env and config.json at the root are added by name
        self.protected = tuple(dict.fromkeys(os.path.abspath(os.fspath(p)) for p in protected))
        self._lock = threading.Lock()
        self._fd = -1
        self._closer: weakref.finalize | None = None
        self._identity: tuple[int, int] | None = None
        if not DEFER_CREATION.get():
            self._first_use()  # made and pinned now: later calls insist on this folder

    def _first_use(self) -> None:
        """Make the folder when it is missing and pin it; it must still resolve to ``root``."""
        with self._lock:
            if self._identity is not None:
                return
            try:
                self._path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ToolExecutionError(f"cannot create the workspace folder {self.root}: "
                                         f"{exc.strerror or type(exc).__name__}") from None
            if os.path.realpath(self._path) != self.root:  # a link was put where the folder was to be
                raise ToolExecutionError(_REPLACED)
            self._open_root()

    # ---- the workspace folder ------------------------------------------------------------

    def close(self) -> None:
        """Close the workspace folder's descriptor; the next call reopens it (the same folder only)."""
        with self._lock:
            if self._closer is not None:
                self._closer()
            self._closer, self._fd = None, -1

    def _open_root(self) -> None:
        if not _SAFE_OPEN:
            self._identity = self._identity or _identity_of(self.root)
            return
        try:
            fd = os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
        except OSError:  # missing, or a link (ELOOP) or file (ENOTDIR) in its place
            raise ToolExecutionError(_REPLACED) from None
        info = os.fstat(fd)
        if self._identity is not None and (info.st_dev, info.st_ino) != self._identity:
            os.close(fd)
            raise ToolExecutionError(_REPLACED)
        self._identity, self._fd = (info.st_dev, info.st_ino), fd
        self._closer = weakref.finalize(self, os.close, fd)

    def _root_fd(self) -> int:
        """A new descriptor of the workspace folder (a duplicate of the pinned one); the caller closes it."""
        self._first_use()
        with self._lock:
            if self._fd < 0:
                self._open_root()
            fd = os.dup(self._fd)  # not inheritable
        try:
            self._check_root()
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_root(self, *, create: bool = True) -> None:
        """Fail clearly when the workspace path no longer names the pinned folder (made first when ``create``;
        without it, a folder not made yet passes: nothing in it can be reached)."""
        if create:
            self._first_use()
        elif self._identity is None:
            return
        if _identity_of(self.root) != self._identity:
            raise ToolExecutionError(_REPLACED)

    # ---- checking and resolving ----------------------------------------------------

    def resolve(self, raw: str) -> tuple[str, list[str]]:
        """``(shown, parts)``: the path as shown to the model, and its real components below the root."""
        text = _clean(raw)
        self._check_root(create=False)  # a path that is refused makes no folder
        if not text:
            return ".", []
        candidate = text if os.path.isabs(text) else os.path.join(self.root, text)
        try:
            real = os.path.realpath(candidate)
        except OSError:  # a link vanished while it was read
            raise ToolExecutionError("the workspace changed while the path was resolved (a folder or link was "
                                     "moved); try again") from None
        if not self.contains(real):
            if os.path.isabs(text) and not self.contains(os.path.normpath(text)):
                raise ToolInputError(f"'{raw}' is outside the workspace: the path must be relative to the "
                                     f"workspace (an absolute path must lie inside it). {_HINT}")
            raise ToolInputError(f"'{raw}' leads outside the workspace through a symbolic link; only files "
                                 f"inside the workspace can be used. {_HINT}")
        rel = os.path.relpath(real, self.root)
        parts = [] if rel == "." else rel.split(os.sep)
        return ("/".join(parts) or "."), parts

    def contains(self, path: str) -> bool:
        try:
            return os.path.commonpath([self.root, path]) == self.root
        except ValueError:  # different drives (Windows)
            return False

    # ---- opening -------------------------------------------------------------------------

    def open_dir(self, parts: list[str], *, create: bool = False) -> int:
        """A file descriptor of the folder ``parts`` (created when ``create``), walked from the pinned
        workspace descriptor without following links; POSIX only."""
        fd = self._root_fd()
        for name in parts:
            fd = _enter(fd, name, create)  # closes the old fd, also when it fails
        return fd

    def open_file(self, parts: list[str], shown: str, *, write: bool = False, append: bool = False) -> int:
        """A file descriptor of the regular file ``parts``: read-only, or for writing (created, parents too).

        The app's configuration files are refused (see the module's docstring)."""
        if not parts:
            raise ToolInputError(f"'{shown}' is the workspace folder, not a file. {_HINT}")
        if not _SAFE_OPEN:
            self._check_root()
            path = os.path.join(self.root, *parts)
            if write:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            guard = self._guard()
            if _folder_name(_identity_of(os.path.dirname(path)), parts[-1]) in guard.names:
                raise _config_refusal(shown, write)
            return _open_regular(None, path, shown, write, append, guard.files)
        parent = self.open_dir(parts[:-1], create=write)
        try:
            guard = self._guard()
            info = os.fstat(parent)
            if _folder_name((info.st_dev, info.st_ino), parts[-1]) in guard.names:
                raise _config_refusal(shown, write)
            return _open_regular(parent, parts[-1], shown, write, append, guard.files)
        finally:
            os.close(parent)

    def _guard(self) -> _Guard:
        """Where the protected files are now: their folders (by identity) and names, and their identities."""
        names = {_folder_name(self._identity, name) for name in CONFIG_NAMES} if self._identity else set()
        files: set[tuple[int, int]] = set()
        root_names = [os.path.join(self.root, name) for name in CONFIG_NAMES]
        for path in (*self.protected, *root_names):
            try:
                real = os.path.realpath(path)  # a link named .env: its target is what the app reads
            except OSError:
                real = path
            for candidate in dict.fromkeys((path, real)):
                folder = _identity_of(os.path.dirname(candidate), follow=True)
                if folder is not None:
                    names.add(_folder_name(folder, os.path.basename(candidate)))
            for follow in (False, True):
                found = _identity_of(path, follow=follow)
                if found is not None:
                    files.add(found)
        return _Guard(names, files)

    def entries(self, parts: list[str], shown: str) -> list[tuple[str, str, int]]:
        """``(name, kind, size)`` of what the folder ``parts`` holds; links are not followed."""
        if _SAFE_OPEN:
            try:
                fd = self.open_dir(parts)
            except FileNotFoundError:
                raise ToolExecutionError(f"there is no folder '{shown}' in the workspace. {_HINT}") from None
            target: int | str = fd
        else:
            self._check_root()
            fd, target = -1, os.path.join(self.root, *parts)
            if not os.path.isdir(target):
                raise ToolExecutionError(f"there is no folder '{shown}' in the workspace. {_HINT}")
        try:
            with os.scandir(target) as listing:
                return [_entry(item) for item in listing]
        finally:
            if fd >= 0:
                os.close(fd)


def _identity_of(path: str, *, follow: bool = False) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path`` (a link itself unless ``follow``), or ``None`` when it is missing."""
    try:
        info = os.stat(path, follow_symlinks=follow)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def _fold(name: str) -> str:
    """``name`` as a case-insensitive file system (or Windows) compares it: ``.ENV``, ``.env.`` and ``.env`` are one."""
    if os.name == "nt":
        name = name.split(":", 1)[0]  # an NTFS stream (.env::$DATA) is the file itself
    return unicodedata.normalize("NFC", name).rstrip(" .").casefold()


def _folder_name(folder: tuple[int, int] | None, name: str) -> tuple[int, int, str]:
    return (*(folder or (-1, -1)), _fold(name))


def _config_refusal(shown: str, write: bool) -> ToolInputError:
    why = ("the next app would run with whatever is written there" if write
           else "it holds API keys, which must not reach the conversation")
    fix = ("Write your data to another file, e.g. notes.txt; ask the user to change settings." if write
           else "Ask the user for the setting you need instead.")
    return ToolInputError(f"'{shown}' is one of the app's configuration files ({why}); the file tools may not "
                          f"read or change the app's configuration. {fix}")


def printable(name: str) -> str:
    """``name`` with control characters written as escapes (``\\n``, ``\\x1b``): safe in an observation."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], name)


def _entry(item: os.DirEntry) -> tuple[str, str, int]:
    try:
        info = item.stat(follow_symlinks=False)
    except OSError:
        return item.name, "unknown", 0
    mode = info.st_mode
    kind = ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else
            "link" if stat.S_ISLNK(mode) else "other")
    return item.name, kind, info.st_size if kind == "file" else 0


def _clean(raw: object) -> str:
    """The path text, or ``ToolInputError`` for anything that smells of escaping the workspace."""
    if not isinstance(raw, str):
        raise ToolInputError(f"the path must be text, got {type(raw).__name__}. {_HINT}")
    text = raw.strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    if "\x00" in text:
        raise ToolInputError(f"the path contains a NUL byte. {_HINT}")
    if len(text) > 4096:
        raise ToolInputError(f"the path is too long. {_HINT}")
    if _URI.match(text):
        raise ToolInputError(f"{text[:200]!r} is a URI, not a path; give a path relative to the workspace. {_HINT}")
    layer = text
    for depth in range(4):  # the text itself, then each percent-decoding of it
        _check_layer(layer, raw, encoded=depth > 0)
        try:
            decoded = unquote(layer, errors="strict")
        except UnicodeDecodeError:
            raise ToolInputError(f"{text[:200]!r} holds percent-encoded bytes that are not UTF-8 text (like the "
                                 f"overlong '%c0%ae'). {_HINT}") from None
        if decoded == layer:
            break
        layer = decoded
    return text.replace("\\", "/")


def _check_layer(text: str, raw: str, *, encoded: bool) -> None:
    how = "percent-encoded " if encoded else ""
    if "\x00" in text:
        raise ToolInputError(f"'{raw}' contains a {how}NUL byte. {_HINT}")
    if _CONTROL.search(text):
        raise ToolInputError(f"{raw[:200]!r} contains a {how}control character (a newline, tab, escape...); "
                             f"file names must be plain text. {_HINT}")
    folded = unicodedata.normalize("NFKC", text)
    if folded != text:  # fullwidth "．．／" and the like: what a lenient decoder would see
        _check_layer(folded, raw, encoded=encoded)
    normalized = text.replace("\\", "/")
    if normalized.startswith("~"):
        raise ToolInputError(f"'{raw}' starts with {how}'~': home folders are outside the workspace. {_HINT}")
    if ".." in normalized.split("/"):
        raise ToolInputError(f"'{raw}' contains a {how}'..' component: the path must stay inside the "
                             f"workspace. {_HINT}")
    if encoded and normalized.startswith("/"):
        raise ToolInputError(f"'{raw}' is a percent-encoded absolute path. {_HINT}")


def _enter(fd: int, name: str, create: bool) -> int:
    """Open the folder ``name`` in ``fd`` without following links; close ``fd``."""
    flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
    try:
        try:
            new = os.open(name, flags, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            new = os.open(name, flags, dir_fd=fd)
    except NotADirectoryError:
        raise ToolInputError(f"'{name}' is a file, not a folder. {_HINT}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link appeared after the check
            raise ToolExecutionError("the workspace changed while the path was opened (a symbolic link "
                                     "appeared); try again") from None
        raise
    finally:
        os.close(fd)
    return new


def _open_regular(parent: int | None, name: str, shown: str, write: bool, append: bool,
                  protected: set[tuple[int, int]]) -> int:
    """Open ``name`` (in ``parent``) only when it is, or becomes, a regular file that is not ``protected``."""
    dir_fd = parent if _SAFE_OPEN else None
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        if not write:
            raise ToolExecutionError(f"there is no file '{shown}' in the workspace. {_HINT}") from None
        before = None
    if before is not None:
        if (before.st_dev, before.st_ino) in protected:  # a hard link to a configuration file
            raise _config_refusal(shown, write)
        _check_kind(before, shown, write)
    flags = _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | getattr(os, "O_BINARY", 0)
    flags |= (os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0)) if write else os.O_RDONLY
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    try:
        after = os.fstat(fd)
        if before is not None and (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise ToolExecutionError(f"'{shown}' changed while it was opened; try again")
        if (after.st_dev, after.st_ino) in protected:
            raise _config_refusal(shown, write)
        _check_kind(after, shown, write)
        if write and not append:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_kind(info: os.stat_result, shown: str, write: bool) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise ToolInputError(f"'{shown}' is a folder, not a file; use list-dir to see what it holds.")
    if stat.S_ISLNK(info.st_mode):
        raise ToolExecutionError(f"'{shown}' changed into a symbolic link while it was opened; try again")
    if not stat.S_ISREG(info.st_mode):
        raise ToolInputError(f"'{shown}' is not a regular file (a device, FIFO or socket); only regular "
                             f"files can be read or written.")
    if info.st_nlink > 1:
        what = "write to a new file instead" if write else "only files with a single name can be read"
        raise ToolInputError(f"'{shown}' has other hard links, which may be names of a file outside the "
                             f"workspace; {what}.")
