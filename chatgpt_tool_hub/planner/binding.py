"""How a task's ``args`` reach its tool, and how ``<resource>-N`` placeholders are filled.

Plan arguments are keyed by resource kind (``text``, ``image``, ``audio``,
``video``) or by a parameter's exact name. ``bind`` maps them onto the tool's
parameters by name first, then by kind (``Tool.input_kinds()``).
``substitute`` replaces placeholders with the outputs of finished tasks; a
placeholder that cannot be filled is an error, never passed through.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping, Sequence

from ..tools.base import Tool

__all__ = ["RESOURCE_KINDS", "PLACEHOLDER", "placeholders", "whole_placeholder", "bind", "tool_input",
           "substitute", "UnresolvedPlaceholder", "resource_value", "describe_inputs", "full_paths", "locate",
           "workspace_roots", "required_parameters"]

RESOURCE_KINDS = ("text", "image", "audio", "video")
FILE_KINDS = ("image", "audio", "video")
# <resource>-N as the issue writes it; <GENERATED>-N as HuggingGPT's prompts do; also as models misspell
# them: <GENERATED-0>, <GENERATED>_0, <resource_1> (the id is group 1 or group 2: use ref_id)
PLACEHOLDER = re.compile(r"<\s*(?:resource|generated)\s*(?:>\s*[-_]\s*(\d+)|[-_]\s*(\d+)\s*>)", re.I)


def ref_id(match: re.Match) -> int:
    """The task id a PLACEHOLDER match names."""
    return int(match.group(1) or match.group(2))
_PATH = re.compile(r"(?:[A-Za-z]:)?[\w./\\~-]*[\w-]\.(?:png|jpe?g|gif|bmp|webp|tiff?|wav|mp3|flac|ogg|m4a|mp4|avi|mov|"
                   r"webm|mkv)\b", re.I)


class UnresolvedPlaceholder(ValueError):
    """A ``<resource>-N`` whose task has no usable output."""


def placeholders(value: Any) -> list[int]:
    """Task ids referenced anywhere inside ``value`` (strings, lists, dicts)."""
    found: list[int] = []
    for text in _strings(value):
        found.extend(ref_id(m) for m in PLACEHOLDER.finditer(text))
    return found


def whole_placeholder(value: Any) -> int | None:
    """N when ``value`` is exactly ``<resource>-N`` (spaces aside)."""
    if isinstance(value, str):
        match = PLACEHOLDER.fullmatch(value.strip())
        if match:
            return ref_id(match)
    return None


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def describe_inputs(tool: Tool) -> str:
    kinds = tool.input_kinds()
    return ", ".join(kind if name == kind else f"{kind} ({name})" for name, kind in kinds.items()) or "nothing"


def bind(tool: Tool, args: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Map plan argument keys to tool parameters: ``({param: arg_key}, problems)``."""
    kinds = tool.input_kinds()
    required = required_parameters(tool)
    mapping: dict[str, str] = {}
    problems: list[str] = []
    for key in args:
        param = _param_for(key, kinds, mapping, required)
        if param is None:
            problems.append(f"'{tool.name}' takes {describe_inputs(tool)}, not a {key!r} argument")
        else:
            mapping[param] = key
    for param in required:
        if param not in mapping:
            problems.append(f"'{tool.name}' needs a {kinds.get(param, 'text')} argument"
                            + (f" ('{param}')" if kinds.get(param) != param else ""))
    return mapping, problems


def _param_for(key: str, kinds: Mapping[str, str], taken: Mapping[str, str], required: list[str]) -> str | None:
    if key in kinds and key not in taken:
        return key
    free = [p for p, k in kinds.items() if k == key and p not in taken]
    if free:
        return sorted(free, key=lambda p: p not in required)[0]
    # a single-text-parameter tool takes a lone non-resource argument under any key ("query", "input")
    if key not in FILE_KINDS:
        text_params = [p for p, k in kinds.items() if k == "text"]
        if len(kinds) == 1 and len(text_params) == 1 and text_params[0] not in taken:
            return text_params[0]
    return None


def required_parameters(tool: Tool) -> list[str]:
    """The parameters a task of ``tool`` must give (``text`` for a tool that takes one string)."""
    if tool.parameters is None:
        return ["text"]
    props = tool.parameters.get("properties") or {}
    return [p for p in tool.parameters.get("required") or () if p in props]


def tool_input(tool: Tool, args: Mapping[str, Any]) -> str | dict[str, Any]:
    """What ``tool.run`` receives: the single string for string tools, else ``{param: value}``."""
    mapping, problems = bind(tool, args)
    if problems:
        raise ValueError("; ".join(problems))
    if tool.parameters is None:
        value = args[mapping["text"]] if "text" in mapping else ""
        return value if isinstance(value, str) else str(value)
    return {param: args[key] for param, key in mapping.items()}


def substitute(value: Any, outputs: Mapping[int, str]) -> Any:
    """``value`` with every ``<resource>-N`` replaced by ``outputs[N]`` (whole or inside a string)."""
    if isinstance(value, str):
        whole = whole_placeholder(value)
        if whole is not None:
            return _lookup(outputs, whole)
        return PLACEHOLDER.sub(lambda m: _lookup(outputs, ref_id(m)), value)
    if isinstance(value, Mapping):
        return {k: substitute(v, outputs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [substitute(v, outputs) for v in value]
    return value


def _lookup(outputs: Mapping[int, str], task_id: int) -> str:
    output = outputs.get(task_id)
    if output is None or output == "":
        raise UnresolvedPlaceholder(f"<resource>-{task_id} has no output to substitute")
    return output


def resource_value(output: str, kind: str, *, inputs: Iterable[Any] = (), roots: Sequence[str] = (),
                   value: str | None = None) -> str:
    """What a ``<resource>-N`` stands for: the file path for image/audio/video outputs, else the text --
    the tool's bare result (``ToolResult.value``: the caption, not the sentence around it) when it gives one.

    A file output is often named inside a sentence that also names the input
    ("Found 2 objects in image/a.png ... Annotated image: image/b_detect_a.png"):
    paths of the task's own input files are passed over, and of the rest the
    last one that exists (in the working directory or one of ``roots``) wins.
    """
    text = (output or "").strip()
    bare = (value or "").strip()
    if kind not in FILE_KINDS:
        return bare or text
    if bare and locate(bare, roots):
        return bare
    if locate(text, roots):
        return text
    own = {os.path.basename(v) for v in _strings(list(inputs)) if v}
    paths = [p for p in _PATH.findall(text) if os.path.basename(p) not in own] or _PATH.findall(text)
    for path in reversed(paths):
        if locate(path, roots):
            return path
    return paths[-1] if paths else text


def locate(path: str, roots: Sequence[str] = ()) -> str | None:
    """The absolute path of an existing file named ``path`` (as is, or under one of ``roots``)."""
    if not path or len(path) > 4096 or "\n" in path:
        return None
    for base in ("", *roots):
        candidate = os.path.join(base, path) if base else path
        try:
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
        except (OSError, ValueError):
            return None
    return None


def full_paths(text: str, roots: Sequence[str] = ()) -> str:
    """``text`` with every relative path of an existing media file made absolute."""
    def absolute(match: re.Match) -> str:
        path = match.group(0)
        return path if os.path.isabs(path) else (locate(path, roots) or path)

    return _PATH.sub(absolute, text or "")


def workspace_roots(tools: Iterable[Any]) -> list[str]:
    """Folders that tools resolve relative file names in (an expert tool's ``workspace``)."""
    roots: list[str] = []
    for tool in tools:
        root = getattr(tool, "workspace", None)
        if root and str(root) not in roots:
            roots.append(str(root))
    return roots
