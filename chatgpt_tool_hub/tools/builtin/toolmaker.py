"""``tool-maker``: the LLM writes a tool -- a Python function with a name, a description and a parameter schema.

Actions (the ``action`` argument):

* ``make``: ``name``, ``description``, ``parameters`` (a JSON schema of the
  function's arguments, in any dialect the schema layer normalises) and
  ``source`` (Python code defining a function named like the tool, ``-`` ->
  ``_``, or exactly one function). The source is parsed here (never run in the
  app's process), then defined once in the sandbox to catch import and
  definition errors; the tool is kept **for the session that made it**.
* ``call``: ``name`` and ``arguments``: the arguments are validated against
  the tool's schema (unknown names refused, safe coercions), then the function
  runs in a worker process of the session -- a ``python`` tool of the
  tool-maker's own, with the same limits (``python_timeout``,
  ``python_max_memory_mb``, scrubbed environment, the workspace as working
  directory) -- and its return value comes back as JSON, after what it printed.
* ``list``: the session's tools with their parameters; ``remove``: ``name``.

Each call sends the source and the arguments to the worker (so a worker that
was stopped by a timeout, ``app.reset`` or eviction costs nothing but a new
process); the function runs in a fresh namespace each time. Another session
never sees, calls or lists the tools of this one: it is refused with the
tools it has. ``reset(session)`` forgets that session's tools, ``close()``
every session's. The tool is **dangerous** (it defines and runs code): the
app's approver is asked before every call, and sees the action in the input.
The worker is the python tool's, so the same caveat holds: it limits
accidents, it is not a security boundary.
"""

from __future__ import annotations

import ast
import json
import re
import threading
import uuid
from typing import Any

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ..base import DEFAULT_CONTEXT, Tool, ToolContext, ToolResult

__all__ = ["ToolMakerTool", "MadeTool"]

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
_ACTIONS = ("make", "call", "list", "remove")


class MadeTool(Tool):
    """A tool made by ``tool-maker``: a schema, and a function that runs in the session's sandbox worker."""

    needs_context = True
    dangerous = True  # it runs code the model wrote: the approver is asked, as for tool-maker's own calls
    egress = "code"

    def __init__(self, maker: "ToolMakerTool", session_id: str, name: str, description: str, parameters: dict,
                 source: str, function: str):
        self.maker, self.session_id = maker, session_id
        self.name, self.description, self.source, self.function = name, description, source, function
        self.parameters = parameters
        self.parameter_schema  # noqa: B018 - normalised and checked now: a bad schema is refused at make

    def _run(self, context: ToolContext = DEFAULT_CONTEXT, **arguments: Any) -> ToolResult:
        session = str(getattr(context, "session_id", None) or "default")
        if session != self.session_id:
            raise ToolInputError(f"the tool '{self.name}' belongs to another session; tools made with tool-maker "
                                 f"are used only in the session that made them")
        return self.maker.execute(self, arguments, context)


class ToolMakerTool(Tool):
    name = "tool-maker"
    dangerous = True  # it defines and runs code
    egress = "code"
    needs_context = True
    description = (
        "tool-maker: makes a new tool from a Python function you write, for this conversation, and calls it; "
        "use it when a calculation or a data task will be needed again, or a reusable helper makes it clearer. "
        'Make: {"action": "make", "name": "<kebab-case-name>", "description": "<what it does>", "parameters": '
        '<JSON schema of the arguments>, "source": "<Python code defining def <name_with_underscores>(...)>"}. '
        'Call: {"action": "call", "name": "<name>", "arguments": {<the arguments>}}. '
        'List: {"action": "list"}. Remove: {"action": "remove", "name": "<name>"}. '
        "The function runs in a separate Python process (standard library; files in the working directory); "
        "return a JSON-serialisable value. "
        'Example: {"action": "make", "name": "bmi", "description": "Body-mass index", "parameters": {"type": '
        '"object", "properties": {"kg": {"type": "number"}, "m": {"type": "number"}}, "required": ["kg", "m"]}, '
        '"source": "def bmi(kg, m):\\n    return round(kg / m ** 2, 1)"} -> "Made the tool \'bmi\' ...", then '
        '{"action": "call", "name": "bmi", "arguments": {"kg": 70, "m": 1.75}} -> "22.9".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(_ACTIONS), "description": "what to do"},
            "name": {"type": "string", "description": "the tool's name (kebab-case)"},
            "description": {"type": "string", "description": "make: what the tool does, for later calls"},
            "parameters": {"type": "object", "description": "make: JSON schema of the function's arguments"},
            "source": {"type": "string", "description": "make: Python code that defines the function"},
            "arguments": {"type": "object", "description": "call: the arguments, as the schema says"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, *, python: Any = None, max_tools: int = 20, max_source_chars: int = 20_000,
                 max_result_chars: int = 8000):
        for key, value in (("tool_maker_max_tools", max_tools), ("tool_maker_max_source_chars", max_source_chars),
                           ("tool_maker_max_result_chars", max_result_chars)):
            if value <= 0:
                raise ConfigError(f"setting '{key}' must be > 0", key=key)
        if python is None:
            from .python_tool import PythonTool

            python = PythonTool()
        self.python = python  # the sandbox: a python tool of the tool-maker's own (one worker per session)
        self.max_tools, self.max_source_chars, self.max_result_chars = int(max_tools), int(max_source_chars), \
            int(max_result_chars)
        self._marker = f"__tool_hub_result_{uuid.uuid4().hex}__:"
        self._lock = threading.Lock()
        self._made: dict[str, dict[str, MadeTool]] = {}

    @classmethod
    def from_context(cls, context: Any) -> "ToolMakerTool":
        from .python_tool import PythonTool

        settings = context.settings
        return cls(python=PythonTool.from_context(context), max_tools=settings.get("tool_maker_max_tools", 20),
                   max_source_chars=settings.get("tool_maker_max_source_chars", 20_000),
                   max_result_chars=settings.get("tool_maker_max_result_chars", 8000))

    # ---- what the app sees -----------------------------------------------------------------

    def tools_for(self, session_id: str = "default") -> list[MadeTool]:
        """The tools made in ``session_id``, in the order they were made."""
        with self._lock:
            return list(self._made.get(session_id, {}).values())

    def session_tools(self, session_id: str) -> list[Tool]:
        return list(self.tools_for(session_id))

    def reset(self, session_id: str | None = None) -> None:
        """Forget the tools of one session (every session's with ``None``) and stop its worker."""
        with self._lock:
            if session_id is None:
                self._made.clear()
            else:
                self._made.pop(session_id, None)
        self.python.reset(session_id)

    def close(self) -> None:
        self.reset(None)
        self.python.close()

    # ---- the actions -------------------------------------------------------------------------

    def _run(self, action: str, name: str | None = None, description: str | None = None,
             parameters: dict | None = None, source: str | None = None, arguments: dict | None = None,
             context: ToolContext = DEFAULT_CONTEXT) -> str:
        context = context or DEFAULT_CONTEXT
        session = str(context.session_id or "default")
        if action == "list":
            return self._list(session)
        name = str(name or "").strip()
        if not name:
            raise ToolInputError(f"tool-maker {action} needs the tool's \"name\"")
        if action == "make":
            return self._make(session, name, description, parameters, source, context)
        made = self._find(session, name)
        if action == "remove":
            with self._lock:
                self._made.get(session, {}).pop(made.name, None)
            return f"Removed the tool '{made.name}' from this session."
        return made.run(arguments if arguments is not None else {}, context)

    def _find(self, session: str, name: str) -> MadeTool:
        with self._lock:
            tools = dict(self._made.get(session, {}))
        made = tools.get(name) or next((t for n, t in tools.items() if n.lower() == name.lower()), None)
        if made is None:
            have = ", ".join(tools) or "(none)"
            raise ToolInputError(f"no tool named {name!r} was made in this session (tools made with tool-maker "
                                 f"belong to the session that made them); this session has: {have}")
        return made

    def _list(self, session: str) -> str:
        tools = self.tools_for(session)
        if not tools:
            return "No tools were made in this session yet; make one with {\"action\": \"make\", ...}."
        lines = [f"Tools made in this session ({len(tools)}):"]
        for made in tools:
            lines.append(f"- {made.name}: {made.description} Arguments: {made.describe_parameters(300) or '(none)'}")
        return "\n".join(lines)

    def _make(self, session: str, name: str, description: str | None, parameters: Any, source: str | None,
              context: ToolContext) -> str:
        if not _NAME.fullmatch(name) or len(name) > 48:
            raise ToolInputError(f"tool name {name[:60]!r} is not allowed: use lower-case letters, digits and single "
                                 f"'-' or '_' between them, starting with a letter (e.g. unit-convert), at most 48")
        source = str(source or "")
        if not source.strip():
            raise ToolInputError("tool-maker make needs the Python \"source\" of the function")
        if len(source) > self.max_source_chars:
            raise ToolInputError(f"the source is {len(source)} characters; at most {self.max_source_chars} "
                                 f"(tool_maker_max_source_chars)")
        function = _function_name(source, name)
        schema = parameters if parameters is not None else {"type": "object", "properties": {}}
        if not isinstance(schema, dict):
            raise ToolInputError("\"parameters\" must be a JSON schema object, e.g. {\"type\": \"object\", "
                                 "\"properties\": {\"x\": {\"type\": \"number\"}}, \"required\": [\"x\"]}")
        schema = {"type": "object", "properties": schema} if "properties" not in schema and schema and all(
            isinstance(v, dict) for v in schema.values()) else schema
        try:
            made = MadeTool(self, session, name, " ".join(str(description or name).split()), dict(schema), source,
                            function)
        except ConfigError as exc:
            raise ToolInputError(f"the parameters are not a valid JSON schema: {exc}") from None
        with self._lock:
            tools = self._made.setdefault(session, {})
            if name not in tools and len(tools) >= self.max_tools:
                raise ToolInputError(f"this session has {len(tools)} made tools, the most it may have "
                                     f"(tool_maker_max_tools); remove one first")
        self._define(made, context)  # runs the module code once in the sandbox: import errors show now
        with self._lock:
            replaced = name in self._made.setdefault(session, {})
            self._made[session][name] = made
        verb = "Replaced" if replaced else "Made"
        return (f"{verb} the tool '{name}' for this session: {made.description} Arguments: "
                f"{made.describe_parameters(300) or '(none)'}. Call it with {{\"action\": \"call\", \"name\": "
                f"\"{name}\", \"arguments\": {made.example_input()}}}.")

    # ---- the sandbox -------------------------------------------------------------------------

    def _define(self, made: MadeTool, context: ToolContext) -> None:
        output = self.python.run(self._program(made, None), context)
        if self._marker not in output:
            raise ToolInputError(f"the source of '{made.name}' failed when it was defined:\n"
                                 f"{_clip(_own_traceback(output), self.max_result_chars)}")

    def execute(self, made: MadeTool, arguments: dict, context: ToolContext) -> ToolResult:
        """Run a made tool's function on validated arguments in the session's worker."""
        output = str(self.python.run(self._program(made, arguments), context))
        printed, marker, result = output.rpartition(self._marker)
        if not marker:
            raise ToolExecutionError(f"the tool '{made.name}' failed:\n"
                                     f"{_clip(_own_traceback(output), self.max_result_chars)}")
        value = result.strip()
        printed = printed.rstrip("\n")
        text = f"{printed}\n{value}" if printed and printed != "(no output)" else value
        return ToolResult(_clip(text, self.max_result_chars), value=_clip(value, self.max_result_chars))

    def _program(self, made: MadeTool, arguments: dict | None) -> str:
        """The code the worker runs: define the function in a fresh namespace, call it, print the result."""
        call = (f"    __result = __namespace[{made.function!r}](**__json.loads({json.dumps(arguments)!r}))\n"
                f"    try:\n        __text = __json.dumps(__result, ensure_ascii=False)\n"
                f"    except (TypeError, ValueError):\n        __text = repr(__result)\n"
                f"    print({self._marker!r} + __text)\n") if arguments is not None else (
                f"    if not callable(__namespace.get({made.function!r})):\n"
                f"        raise NameError('the source defines no function {made.function}')\n"
                f"    print({self._marker!r})\n")
        return ("def __tool_hub_made():\n    import json as __json\n"
                f"    __namespace = {{'__name__': {('tool_hub_made.' + made.function)!r}}}\n"
                f"    exec(compile({made.source!r}, {('<tool ' + made.name + '>')!r}, 'exec'), __namespace)\n"
                f"{call}__tool_hub_made()\ndel __tool_hub_made\n")


def _function_name(source: str, name: str) -> str:
    """The function the source defines for tool ``name``: ``name`` with ``-`` -> ``_``, else its only one."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ToolInputError(f"the source is not valid Python: {exc.msg} (line {exc.lineno})") from None
    functions = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    wanted = name.replace("-", "_")
    if wanted in functions:
        return wanted
    if len(functions) == 1:
        return functions[0]
    raise ToolInputError(f"the source must define a function named {wanted} (or exactly one function); it defines "
                         f"{', '.join(functions) or 'none'}")


def _own_traceback(output: str) -> str:
    """A traceback without the frames of the wrapper that defined and called the function."""
    lines = str(output).split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), None)
    first = next((i for i, line in enumerate(lines) if i > (start or 0) and line.lstrip().startswith('File "<tool ')),
                 None)
    if start is None or first is None:
        return str(output)
    return "\n".join(lines[:start + 1] + lines[first:])


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 40] + f"\n... [{len(text) - limit + 40} characters cut]"
