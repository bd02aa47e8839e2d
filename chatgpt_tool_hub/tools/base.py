"""``Tool`` and the ``@tool`` decorator.

A tool takes either one string (``parameters is None`` or a single parameter)
or a JSON object validated against ``parameters`` (a JSON schema). ``run``
works alone ("pure mode"): ``tool.run("input") -> str``.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import ToolInputError

__all__ = ["Tool", "ToolContext", "ToolResult", "FunctionTool", "tool", "schema_from_function", "render_output"]

_RESOURCE_KINDS = ("text", "image", "audio", "video")
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


@dataclass(frozen=True)
class ToolContext:
    """What a running engine hands a tool: the session, the shared budget, the LLM.

    Tools that set ``needs_context = True`` receive it as ``_run(..., context=ctx)``.
    In pure mode (``tool.run(text)`` alone) the context is the default one.
    """

    session_id: str = "default"
    depth: int = 0                                 # nesting depth of the engine that called the tool
    budget: Any = None                             # engine.budget.Budget shared by a run tree, or None
    llm: Any = None                                # the calling engine's LLM, or None
    emit: Callable[[Any], None] | None = None      # forwards events of nested engines
    approve: Callable[[str, Any], bool] | None = None
    usage: Any = None                              # the run's RunUsage: tools that call an LLM add their calls
    redactor: Any = None                           # the app's secret redactor (nested engines use it too)


DEFAULT_CONTEXT = ToolContext()


class ToolResult(str):
    """An observation that also carries the bare result: ``ToolResult("image/a.png shows: a cat", value="a cat")``.

    It is the observation text everywhere a string is expected (the LLM sees
    the sentence); ``value`` is what a plan hands to the next task as
    ``<resource>-N`` (the caption, the transcript, the file path), without the
    sentence around it. A plain ``str`` result is its own value.
    """

    value: str

    def __new__(cls, text: str, value: Any = None) -> "ToolResult":
        result = super().__new__(cls, text)
        result.value = text if value is None else (value if isinstance(value, str) else render_output(value))
        return result


def value_of(result: str) -> str:
    """The bare result of a tool's output (``ToolResult.value``, else the text itself)."""
    return getattr(result, "value", result)


class Tool:
    """Base class of every tool.

    Subclasses set ``name`` and ``description`` and implement ``_run``:
    ``_run(self, text: str)`` for string tools (``parameters is None``), or
    ``_run(self, **arguments)`` when ``parameters`` is a JSON schema.
    """

    name: str = ""
    description: str = ""
    parameters: dict | None = None
    dangerous: bool = False  # asks for approval before each call where an approver is set
    needs_context: bool = False  # True: ``_run`` also receives ``context=ToolContext``
    output_kind: str = "text"  # what the observation names: "text", "image", "audio" or "video" (a file path)

    # ---- building ---------------------------------------------------------------

    @classmethod
    def from_context(cls, context: Any) -> "Tool":
        """Build the tool for an app (``context`` is a :class:`~chatgpt_tool_hub.tools.context.AppContext`
        scoped to this tool). Tools with settings override it; the default takes none."""
        return cls()

    @classmethod
    def from_config(cls, **kwargs: Any) -> "Tool":
        """Build the tool alone from keyword settings (pure mode), e.g. ``PythonTool.from_config(python_timeout=5)``;
        unrelated keys and empty strings are ignored."""
        from .context import pure_context  # the context module imports the registry, which imports this one

        return cls.from_context(pure_context(kwargs))

    # ---- what callers use -----------------------------------------------------

    def run(self, tool_input: str | Mapping[str, Any] = "", context: ToolContext | None = None) -> str:
        """Run the tool on text or a JSON object and return the observation text."""
        extra = {"context": context or DEFAULT_CONTEXT} if self.needs_context else {}
        if self.parameters is None:
            result = self._run(_as_text(tool_input), **extra)
        else:
            arguments = self.parse_arguments(tool_input)
            result = self._run(**arguments, **extra)
        return render_output(result)

    def close(self) -> None:
        """Release resources (worker processes, models). Safe to call twice."""

    def reset(self, session_id: str | None = None) -> None:
        """Forget per-session state (one session, or all when ``None``)."""

    @property
    def single_parameter(self) -> str | None:
        """The name of the only parameter, when the tool takes exactly one."""
        if self.parameters is None:
            return None
        props = self.parameters.get("properties") or {}
        return next(iter(props)) if len(props) == 1 else None

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        """Turn ``tool_input`` into validated keyword arguments or raise ``ToolInputError``."""
        schema = self.parameters or {}
        single = self.single_parameter
        if isinstance(tool_input, Mapping):
            arguments = dict(tool_input)
            if single and single not in arguments and len(arguments) == 1:
                # {"query": "x"} given to a tool whose one parameter is "text"
                arguments = {single: next(iter(arguments.values()))}
        else:
            text = _as_text(tool_input)
            parsed = _maybe_object(text)
            if parsed is not None and (not single or single in parsed):
                arguments = parsed
            elif single:
                arguments = {single: _coerce_scalar(text, (schema["properties"][single] or {}).get("type"))}
            else:
                raise ToolInputError(
                    f"Tool '{self.name}' expects a JSON object with the keys "
                    f"{', '.join(sorted((schema.get('properties') or {})))}; got plain text. "
                    f"Example: {self.example_input()}"
                )
        _validate(self.name, arguments, schema)
        return arguments

    def input_kinds(self) -> dict[str, str]:
        """Each parameter's resource kind: its name when that is image/audio/video, else "text"."""
        if self.parameters is None:
            return {"text": "text"}
        return {p: (p if p in _RESOURCE_KINDS else "text") for p in (self.parameters.get("properties") or {})}

    def example_input(self) -> str:
        props = (self.parameters or {}).get("properties") or {}
        sample = {k: _SAMPLE.get((v or {}).get("type", "string"), "...") for k, v in props.items()}
        return json.dumps(sample, ensure_ascii=False)

    def openai_schema(self) -> dict:
        """The tool as an OpenAI function-calling schema."""
        params = self.parameters or {
            "type": "object",
            "properties": {"input": {"type": "string", "description": "the tool input"}},
            "required": ["input"],
        }
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": params}}

    # ---- what subclasses implement ------------------------------------------

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"tool '{self.name}' does not implement _run")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionTool(Tool):
    """A tool made from a plain function (see :func:`tool`)."""

    def __init__(self, func: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                 dangerous: bool = False):
        self.func = func
        self.name = name or func.__name__.replace("_", "-")
        self.needs_context = "context" in inspect.signature(func).parameters
        schema, doc = schema_from_function(func)
        self.parameters = schema
        self.description = (description or doc or self.name).strip()
        self.dangerous = dangerous
        self.__doc__ = func.__doc__

    def _run(self, **arguments: Any) -> Any:
        return self.func(**arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


def tool(func: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         dangerous: bool = False) -> Any:
    """Make a :class:`Tool` from a function; usable bare (``@tool``) or with arguments."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, dangerous=dangerous)

    return wrap(func) if func is not None else wrap


# ---- helpers -----------------------------------------------------------------

_SAMPLE = {"string": "...", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


def schema_from_function(func: Callable[..., Any]) -> tuple[dict, str]:
    """JSON schema of ``func``'s parameters and its description, from signature and docstring."""
    doc = inspect.getdoc(func) or ""
    summary, param_docs = _split_docstring(doc)
    props: dict[str, dict] = {}
    required: list[str] = []
    try:
        hints = inspect.get_annotations(func, eval_str=True)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = getattr(func, "__annotations__", {})
    for pname, param in inspect.signature(func).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname == "context":
            continue
        prop: dict[str, Any] = {}
        jtype = _JSON_TYPES.get(_origin(hints.get(pname, str)))
        if jtype:
            prop["type"] = jtype
        if pname in param_docs:
            prop["description"] = param_docs[pname]
        if param.default is param.empty:
            required.append(pname)
        else:
            prop["default"] = param.default
        props[pname] = prop
    schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    return schema, summary


def _origin(annotation: Any) -> Any:
    return getattr(annotation, "__origin__", annotation)


def _split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """First paragraph(s) before an ``Args:`` section, and ``name: text`` lines inside it."""
    match = re.search(r"^(Args|Arguments|Parameters):\s*$", doc, flags=re.M)
    if not match:
        return doc, {}
    params: dict[str, str] = {}
    current = None
    for line in doc[match.end():].splitlines():
        item = re.match(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
        if item:
            current = item.group(1)
            params[current] = item.group(2).strip()
        elif current and line.strip() and line.startswith((" ", "\t")):
            params[current] += " " + line.strip()
        elif line.strip() and not line.startswith((" ", "\t")):
            break
    return doc[: match.start()].strip(), params


def _as_text(tool_input: Any) -> str:
    if isinstance(tool_input, str):
        return tool_input
    if isinstance(tool_input, Mapping) and len(tool_input) == 1:
        value = next(iter(tool_input.values()))
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if tool_input is None:
        return ""
    return json.dumps(tool_input, ensure_ascii=False, default=str)


def _maybe_object(text: str) -> dict | None:
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(stripped)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _coerce_scalar(text: str, jtype: str | None) -> Any:
    if jtype in ("integer", "number", "boolean", "array"):
        try:
            return json.loads(text)
        except ValueError:
            return text  # validation reports the wrong type
    return text


def _validate(name: str, arguments: dict, schema: dict) -> None:
    if not schema:
        return
    import jsonschema  # local import: keeps ``import chatgpt_tool_hub`` light

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    if errors:
        problems = "; ".join(
            (f"'{'.'.join(map(str, e.path))}': " if e.path else "") + e.message for e in errors[:5]
        )
        example = json.dumps(
            {k: _SAMPLE.get((v or {}).get("type", "string"), "...") for k, v in (schema.get("properties") or {}).items()},
            ensure_ascii=False,
        )
        raise ToolInputError(f"Invalid input for tool '{name}': {problems}. Expected a JSON object like {example}")


def render_output(result: Any) -> str:
    """What a tool returned, as observation text."""
    if result is None:
        return "(the tool returned no output)"
    if isinstance(result, str):
        return result
    if isinstance(result, bytes):
        return result.decode("utf-8", errors="replace")
    if isinstance(result, (dict, list, tuple, int, float, bool)):
        return json.dumps(result, ensure_ascii=False, default=str)
    return str(result)
