"""Files the user names in a request, checked when the plan is validated -- never a run-time failure.

A plan's image / audio / video argument that is a literal path (not
``<resource>-N``, not a URL) is looked at before anything runs:

* a file already inside the tool's workspace is kept as it is;
* a path the user wrote in the request (or in an earlier user message):
  ``/exp1.jpg``, ``example.jpg``, ``./photos/a.png``, ``"my photo.png"`` --
  is copied into the tool's workspace the Visual ChatGPT way
  (``image/{uuid8}.png``, ``audio/{uuid8}.wav``, ``video/{uuid8}.mp4``) and the
  argument is rewritten to that name; a file that is missing, unreadable, not
  of the argument's kind, or a link to something that is not such a file, is a
  plan problem with the reason;
* any other path for a workspace tool (one the LLM made up) is a plan problem.

Tools without a ``workspace`` read paths themselves: a path the user wrote
must name a readable file, and is passed on unchanged. Only the exact paths
the user wrote are read (no globbing, no search), and images and audio go
through the experts' own ingest checks (formats, decompression bombs, WAV).

That is the ``"local"`` mode of the ``planner_request_files`` setting (the
user's own files, at the terminal). In ``"workspace"`` mode (``tool-hub serve``
forces it: a request comes from anyone the server lets in) nothing outside the
workspace is read or copied: a literal path is used only when its real path
(symlinks and ``..`` resolved) lies inside the tool's workspace -- for a tool
without one, inside a workspace of the request's tools -- and every other path
is a plan problem with one message, whether or not a file is there.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["RequestFiles", "request_paths", "MEDIA_SUFFIXES", "REQUEST_FILE_MODES", "request_files_mode"]

REQUEST_FILE_MODES = ("local", "workspace")  # planner_request_files: any file of this machine, the workspace only

MEDIA_SUFFIXES: dict[str, tuple[str, ...]] = {
    "image": (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff"),
    "audio": (".wav", ".wave", ".mp3", ".flac", ".ogg", ".m4a"),
    "video": (".mp4", ".avi", ".mov", ".webm", ".mkv", ".gif", ".webp", ".apng"),
}
READ_AUDIO = (".wav", ".wave")           # what the audio tools read (16-bit PCM WAV, no ffmpeg)
ANIMATED = (".gif", ".webp", ".apng")     # videos Pillow reads
MAX_COPY_BYTES = 512 * 1024 * 1024        # audio and video are copied as they are; images are re-encoded

_EXT = "|".join(sorted({s[1:] for group in MEDIA_SUFFIXES.values() for s in group}, key=len, reverse=True))
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_QUOTED = re.compile(r"""(["'`“‘])([^"'`“”‘’\n]{1,400}?\.(?:%s))(["'`”’])""" % _EXT, re.I)
_BARE = re.compile(r"(?<![\w./\\~:-])(?:[A-Za-z]:)?[\w./\\~-]*[\w-]\.(?:%s)\b" % _EXT, re.I)
_ALL_SUFFIXES = tuple(sorted({s for group in MEDIA_SUFFIXES.values() for s in group}))
_PATH_CHAR = re.compile(r"[A-Za-z0-9_./\\~-]")
_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")
_HINT = ("plan without it, or reply [] and then \"Answer: \" telling the user that the file cannot be used "
         "and why")
_CONFINED = ("is not a file in this app's workspace, and only workspace files can be used here "
             "(planner_request_files=\"workspace\"); use a file handed over with the request or a file name an "
             "earlier result wrote, exactly as written, or <resource>-N for the output of task N")


def request_files_mode(value: Any) -> str:
    """The ``planner_request_files`` mode ``value`` names (any case), or a ``ConfigError`` naming the choices."""
    from ..errors import ConfigError

    mode = str(value).strip().lower() if isinstance(value, str) else value
    if mode not in REQUEST_FILE_MODES:
        raise ConfigError(f"planner_request_files must be one of {', '.join(REQUEST_FILE_MODES)} (local: any file "
                          f"of this machine a request names; workspace: only files in the app's workspace), not "
                          f"{value!r}", key="planner_request_files")
    return str(mode)


def request_paths(text: str) -> list[str]:
    """The media file paths written in ``text``, in order: bare or quoted (``"my photo.png"``), not URLs."""
    if not isinstance(text, str) or not text:
        return []
    urls = [m.span() for m in _URL.finditer(text)]

    def in_url(span: tuple[int, int]) -> bool:
        return any(start <= span[0] < end for start, end in urls)

    found: list[tuple[int, str]] = []
    quoted: list[tuple[int, int]] = []
    for match in _QUOTED.finditer(text):
        path = match.group(2).strip()
        if path and not in_url(match.span(2)) and not _URL.match(path):
            found.append((match.start(2), path))
            quoted.append(match.span(2))
    for match in _BARE.finditer(text):
        if in_url(match.span()) or any(start <= match.start() < end for start, end in quoted):
            continue
        found.append((match.start(), match.group(0)))
    paths: list[str] = []
    for _, path in sorted(found):
        if path not in paths:
            paths.append(path)
    return paths


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.normpath(os.path.expanduser(a)) == os.path.normpath(os.path.expanduser(b))
    except (TypeError, ValueError):
        return False


class RequestFiles:
    """The files one request names, and the copies made of them (one copy per file, kind and workspace)."""

    def __init__(self, texts: Iterable[str] = (), *, mode: str = "local", roots: Iterable[str] = ()):
        self.mode = request_files_mode(mode)
        self.roots = [str(root) for root in roots if root]  # workspace mode: where a tool without one may read
        self.texts = [t for t in texts if isinstance(t, str)]
        self.named: list[str] = []
        for text in self.texts:
            for path in request_paths(text):
                if path not in self.named:
                    self.named.append(path)
        self.copies: dict[str, str] = {}  # the path as the user wrote it -> the workspace name it became
        self._made: dict[tuple[str, str, str], str] = {}

    @classmethod
    def of_request(cls, query: str, history: Iterable[Mapping[str, Any]] = (), *, mode: str = "local",
                   roots: Iterable[str] = ()) -> "RequestFiles":
        """The paths of the request and of the user's earlier messages; ``mode`` and ``roots`` as in the
        constructor (``planner_request_files``; the request's tools' workspaces)."""
        texts = [m.get("content") for m in history if isinstance(m, Mapping) and m.get("role") == "user"]
        return cls([*[t for t in texts if isinstance(t, str)], query], mode=mode, roots=roots)

    def named_path(self, value: str) -> str | None:
        """The path as the user wrote it, when ``value`` is one of them: a path :func:`request_paths` found, or
        ``value`` itself written word for word in the request (``请描述/exp1.jpg`` names ``/exp1.jpg``)."""
        found = next((path for path in self.named if _same(value, path)), None)
        if found is not None:
            return found
        if not value.lower().endswith(_ALL_SUFFIXES):
            return None
        for text in self.texts:
            for match in re.finditer(re.escape(value), text):
                before = text[match.start() - 1] if match.start() else " "
                after = text[match.end()] if match.end() < len(text) else " "
                if not _PATH_CHAR.match(before) and not _WORD_CHAR.match(after):
                    return value
        return None

    def check(self, value: str, kind: str, tool: Any) -> tuple[str, str | None]:
        """``(the value to use, a problem or None)`` for a literal ``kind`` argument of ``tool``."""
        text = value.strip().strip("'\"`").strip()
        if not text or _URL.match(text) or "\0" in text:
            return value, None
        workspace = getattr(tool, "workspace", None)
        if self.mode == "workspace":
            return value, _confined_problem(text, kind, workspace, self.roots)
        named = self.named_path(text)
        if not workspace:
            if named is None:
                return value, None
            problem = _unusable(Path(os.path.expanduser(named)), kind, need_suffix=False)
            return value, (None if problem is None else f"the {kind} {named!r} named in the request cannot be "
                           f"used: {problem}; {_HINT}")
        from ..errors import ModelFeedbackError
        from ..runtime.filenames import resolve_input

        try:
            resolve_input(text, workspace, kind)
            return value, None  # already in the workspace
        except ModelFeedbackError as exc:
            refused = str(exc)
        if named is None:
            if "hard links" in refused:
                return value, f"its {kind} argument: {refused}"
            return value, (f"its {kind} argument {text!r} is neither a file in the workspace nor a file the request "
                           f"names; use file names exactly as the request or an earlier result wrote them, or "
                           f"<resource>-N for the output of task N")
        return self._ingest(value, named, kind, Path(workspace))

    def _ingest(self, value: str, named: str, kind: str, workspace: Path) -> tuple[str, str | None]:
        source = Path(os.path.expanduser(named))
        key = (os.path.abspath(source), kind, str(workspace))
        if key in self._made:
            return self._made[key], None
        problem = _unusable(source, kind, need_suffix=True)
        if problem is None:
            try:
                name = _copy_in(Path(os.path.realpath(source)), kind, workspace)
            except Exception as exc:  # the experts' checks: ToolInputError, UserError (a missing extra), OSError
                problem = _reason(exc)
            else:
                self._made[key] = name
                self.copies[named] = name
                return name, None
        return value, f"the {kind} {named!r} named in the request cannot be used: {problem}; {_HINT}"


def _confined_problem(text: str, kind: str, workspace: Any, roots: Iterable[str]) -> str | None:
    """Workspace mode: None when ``text`` names a file inside ``workspace`` (a tool without one: inside one of
    ``roots``, as the tool itself would read it), else the plan problem. The problem is the same for a path
    outside that exists and one that does not; only a hard link inside says more."""
    from ..errors import ModelFeedbackError
    from ..runtime.filenames import resolve_input

    if workspace:
        try:
            resolve_input(text, workspace, kind)
            return None
        except ModelFeedbackError as exc:
            if "hard links" in str(exc):  # checked only for a file inside the workspace
                return f"its {kind} argument: {exc}"
    elif _inside_any(text, roots):
        return None
    return f"its {kind} argument {text!r} {_CONFINED}; {_HINT}"


def _inside_any(text: str, roots: Iterable[str]) -> bool:
    """Whether ``text`` (absolute, or relative to the working folder) is a file, with no other hard link, whose
    real path lies inside one of ``roots``."""
    try:
        real = os.path.realpath(os.path.expanduser(text))
        for root in roots:
            top = os.path.realpath(os.path.expanduser(root))
            if os.path.commonpath([top, real]) == top and os.path.isfile(real):
                return os.stat(real).st_nlink == 1
    except (OSError, ValueError):
        return False
    return False


def _unusable(path: Path, kind: str, *, need_suffix: bool) -> str | None:
    """Why ``path`` cannot be read as a ``kind`` file, or None."""
    try:
        if not os.path.lexists(path):
            return "there is no such file"
        real = Path(os.path.realpath(path))
        if not real.is_file():
            return "it is not a regular file" if real.exists() else "it is a link to a file that does not exist"
        if not os.access(real, os.R_OK):
            return "it cannot be read (permission denied)"
    except (OSError, ValueError) as exc:
        return f"it cannot be read ({type(exc).__name__})"
    if not need_suffix:
        return None
    suffixes = MEDIA_SUFFIXES.get(kind, ())
    if os.path.islink(path) and real.suffix.lower() not in suffixes:
        return f"it is a link to a file that is not {_article(kind)} {kind} file"
    suffix = path.suffix.lower()
    if suffix not in suffixes:
        return f"it is not {_article(kind)} {kind} file ({kind} files end in {', '.join(suffixes)})"
    if kind == "audio" and suffix not in READ_AUDIO:
        return f"only WAV audio is read ({suffix} is not); convert it to WAV first"
    if kind in ("audio", "video") and real.stat().st_size > MAX_COPY_BYTES:
        return f"it is larger than {MAX_COPY_BYTES // (1024 * 1024)} MB"
    return None


def _copy_in(source: Path, kind: str, workspace: Path) -> str:
    """Copy a checked file into the workspace; returns its workspace-relative name."""
    from ..runtime import filenames as files

    if kind == "image":
        return files.ingest_image(source, workspace)
    if kind == "audio":
        return files.ingest_audio(source, workspace)
    _probe_video(source)
    name = files.new_path(workspace, "video", source.suffix.lower())
    shutil.copyfile(source, Path(workspace).expanduser().resolve() / name)
    return name


def _probe_video(path: Path) -> None:
    """Open the container (or animated image) without decoding it: ``ToolInputError`` when it is no video."""
    from ..errors import ToolInputError

    if path.suffix.lower() in ANIMATED:
        from PIL import Image, UnidentifiedImageError

        from ..runtime.filenames import check_pixels

        try:
            with Image.open(path, formats=("GIF", "WEBP", "PNG")) as image:
                check_pixels(image, path.name)
        except (UnidentifiedImageError, OSError) as exc:
            raise ToolInputError(f"it is not a video ({type(exc).__name__})") from None
        return
    try:
        import av
    except ImportError:
        from ..runtime.video_io import VIDEO_HINT

        raise ToolInputError(f"reading this video needs PyAV, which is not installed: {VIDEO_HINT}") from None
    try:
        with av.open(str(path)) as container:
            if not any(s.type == "video" for s in container.streams):
                raise ToolInputError("it has no video stream")
    except ToolInputError:
        raise
    except Exception as exc:  # PyAV's own error types for damaged or unknown files
        raise ToolInputError(f"it is not a video ({type(exc).__name__})") from None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, ImportError):
        return (f"reading it needs {exc.name or 'a package'}, which is not installed: "
                f'pip install "chatgpt-tool-hub[experts]"')
    return text.rstrip(".")


def _article(kind: str) -> str:
    return "an" if kind[:1] in "aeiou" else "a"
