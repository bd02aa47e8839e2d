"""``Tool`` and the ``@tool`` decorator.

A tool takes either one string (``parameters is None`` or a single parameter)
or a JSON object validated against ``parameters`` (a JSON schema). ``run``
works alone ("pure mode"): ``tool.run("input") -> str``.
"""

from __future__ import annotations

import ast
import json
from typing import Any, Callable, Iterable, Literal, Mapping, overload

from ..errors import ConfigError, ToolInputError
from ..run.context import DEFAULT_CONTEXT, ToolContext
from .schema import ParameterSchema, describe_schema, schema_types
from .signature import signature_of

__all__ = ["Tool", "ToolContext", "ToolResult", "ToolFailure", "FunctionTool", "tool", "schema_from_function",
           "render_output", "MalformedArguments", "Arguments", "value_of", "DEFAULT_CONTEXT", "Egress"]

_RESOURCE_KINDS = ("text", "image", "audio", "video")

# how a tool can send data out of the machine (see ``Tool.egress``)
Egress = Literal["none", "network", "new-host", "code"]


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


class ToolFailure(str):
    """A failure a tool reports as its output instead of raising it (``url-get: could not reach ...``): the
    text is the observation, and what ``run()`` returns alone, while ``dispatch`` counts the call as failed."""


def value_of(result: str) -> str:
    """The bare result of a tool's output (``ToolResult.value``, else the text itself)."""
    return getattr(result, "value", result)


class MalformedArguments(str):
    """A tool call's arguments that were meant as JSON and are not (a native call cut off mid-object):
    the tool is not run, the model is told what was wrong."""

    problem: str

    def __new__(cls, text: str, problem: str) -> "MalformedArguments":
        result = super().__new__(cls, text)
        result.problem = problem
        return result


class Arguments(dict[str, Any]):
    """Validated keyword arguments, with the coercions applied to them (``notes``) for the observation."""

    notes: list[str]

    def __init__(self, values: Mapping[str, Any] | None = None, notes: Iterable[str] = ()):
        super().__init__(values or {})
        self.notes = list(notes)


def _as_given(values: dict[str, Any], _new: Any = dict.__new__, _update: Any = dict.update) -> Arguments:
    """``Arguments(values)``, made without a Python-level ``__init__`` call (once per tool call)."""
    made: Arguments = _new(Arguments)
    _update(made, values)
    made.notes = []
    return made


class Tool:
    """Base class of every tool.

    Subclasses set ``name`` and ``description`` and implement ``_run``:
    ``_run(self, text: str)`` for string tools (``parameters is None``), or
    ``_run(self, **arguments)`` when ``parameters`` is a JSON schema. The schema
    may be written in any common dialect (OpenAPI ``nullable``, type arrays,
    ``"type": "dict"`` ...): it is normalised once, on first use
    (:mod:`.schema`), and an unfixable one is a ``ConfigError`` naming the tool.

    Two attributes tell ``dispatch`` what a tool means for untrusted content
    (:mod:`chatgpt_tool_hub.run.taint`):

    * ``reads_untrusted``: its results are content nobody here controls (web
      pages, search results, remote services): after such a call the run is
      tainted, and the result is shown to the model between
      ``<<untrusted content from TOOL>>`` and ``<<end of untrusted content>>``.
    * ``egress``: how it can send data out: ``"none"``; ``"network"`` (every
      call sends: ``email``, ``sms``, a writing API call); ``"new-host"`` (a
      fetch: only a host the run has not fetched yet counts, named by
      :meth:`egress_host`; redirects the fetch follows are not seen); ``"code"`` (it runs code, which can open sockets;
      the ``untrusted_egress_code`` setting decides whether that counts). After
      the run is tainted an egress call goes through the ``untrusted_egress``
      policy (ask the approver with the provenance, allow or deny).
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] | None = None
    dangerous: bool = False  # asks for approval before each call where an approver is set
    needs_context: bool = False  # True: ``_run`` also receives the ToolContext, as ``context_argument``
    context_argument: str = "context"  # the keyword the ToolContext is passed as
    allow_extra_arguments: bool = False  # True: arguments the schema does not name are passed on, not refused
    output_kind: str = "text"  # what the observation names: "text", "image", "audio" or "video" (a file path)
    # tools this one cannot share an app with: tool names, or "group:<name>" (one tool of a group per app);
    # create_app refuses a tools_list that holds both, and a default tool gives way to a listed one
    conflicts_with: tuple[str, ...] = ()
    reads_untrusted: bool = False  # its results are content nobody here controls (see the class docstring)
    egress: Egress = "none"  # how it can send data out of the machine (see the class docstring)

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

    @classmethod
    def from_function(cls, definition: Mapping[str, Any], func: Callable[..., Any], *,
                      dangerous: bool = False) -> "FunctionTool":
        """A tool from a raw function definition -- OpenAI's ``{"name", "description", "parameters"}``
        (optionally wrapped as ``{"type": "function", "function": {...}}``), a BFCL definition in its own
        dialect -- and the function that implements it, called with the validated arguments."""
        return FunctionTool.from_definition(definition, func, dangerous=dangerous)

    # ---- the schema ----------------------------------------------------------------

    @property
    def parameter_schema(self) -> ParameterSchema | None:
        """The normalised schema (built once; ``None`` for a string tool)."""
        if self.parameters is None:
            return None
        cached = self.__dict__.get("_parameter_schema")
        if cached is None or cached.source is not self.parameters:
            cached = ParameterSchema(self.parameters, self.name or type(self).__name__,
                                     allow_extra=self.allow_extra_arguments)
            if self.needs_context and self.context_argument in cached.properties:
                raise ConfigError(f"tool '{self.name}': its parameter {self.context_argument!r} collides with the "
                                  f"ToolContext it asks for (needs_context); set context_argument to another "
                                  f"name", key=self.name)
            self.parameters = cached.schema  # the normalised one, also in openai_schema()
            cached.source = self.parameters
            self.__dict__["_parameter_schema"] = cached
        return cached

    # ---- what callers use -----------------------------------------------------

    def run(self, tool_input: str | Mapping[str, Any] = "", context: ToolContext | None = None) -> str:
        """Run the tool on text or a JSON object and return the observation text."""
        if isinstance(tool_input, MalformedArguments):
            raise ToolInputError(f"{tool_input.problem}; the tool '{self.name}' was not run. Send the arguments "
                                 f"again as one complete JSON object.")
        extra = {self.context_argument: context or DEFAULT_CONTEXT} if self.needs_context else {}
        notes: list[str] = []
        if self.parameters is None:
            result = self._run(_as_text(tool_input), **extra)
        else:
            arguments = self.parse_arguments(tool_input)
            notes = getattr(arguments, "notes", [])
            result = self._run(**arguments, **extra)
        text = render_output(result)
        if notes:  # the model sees what was adjusted, and sends it right next time
            return ToolResult(f"{text}\n[input adjusted: {'; '.join(notes)}]", value=value_of(text))
        return text

    def egress_host(self, tool_input: Any) -> str | None:
        """For an ``egress = "new-host"`` tool: the ``host:port`` that ``tool_input`` would reach, or None when
        it reaches no host (not egress)."""
        return None

    def close(self) -> None:
        """Release resources (worker processes, models). Safe to call twice."""

    def reset(self, session_id: str | None = None) -> None:
        """Forget per-session state (one session, or all when ``None``)."""

    def session_tools(self, session_id: str) -> list["Tool"]:
        """Tools this tool made for ``session_id`` (``tool-maker``'s): the app offers them to the model
        in that session's next questions, next to the app's own tools."""
        return []

    @property
    def single_parameter(self) -> str | None:
        """The name of the only parameter, when the tool takes exactly one."""
        schema = self.parameter_schema
        return schema.single if schema is not None else None

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        """Turn ``tool_input`` into validated keyword arguments or raise ``ToolInputError``.

        A JSON object is taken as the arguments as they are (an unknown name is
        refused, listing the accepted ones); only plain text given to a tool
        with one parameter becomes that parameter's value, and no input at all
        leaves every parameter to its default. Safe coercions
        (``"5"`` → ``5`` for an integer, ``null`` for an optional parameter →
        omitted ...) are applied and listed in the result's ``notes``.
        """
        schema = self.parameter_schema
        if schema is None:
            return Arguments({"text": _as_text(tool_input)})
        if type(tool_input) is dict and schema.valid_as_is(tool_input):  # the common case, in a microsecond
            return _as_given(tool_input)
        single = schema.single
        if isinstance(tool_input, MalformedArguments):
            raise ToolInputError(tool_input.problem)
        if isinstance(tool_input, Mapping):
            arguments = dict(tool_input)
        else:
            text = _as_text(tool_input)
            parsed = maybe_object(text)
            if not text.strip() and not (single and single in schema.required):
                arguments = {}  # no input: the parameters' defaults (a missing required one is named)
            elif parsed is not None and (not single or single in parsed
                                       or "string" not in schema_types(schema.properties.get(single))):
                arguments = parsed
            elif single:
                arguments = {single: _plain_value(text, schema_types(schema.properties.get(single)))}
            else:
                raise ToolInputError(
                    f"Tool '{self.name}' expects a JSON object with the keys "
                    f"{', '.join(sorted(schema.properties))}; got plain text. Example: {schema.example()}"
                )
        values, notes = schema.prepare(arguments)
        return Arguments(values, notes)

    def _prepared(self, arguments: dict[str, Any]) -> Arguments:
        """``arguments`` validated and coerced by the schema: the last step of :meth:`parse_arguments`, for
        JSON tools that override it to reshape their input first."""
        schema = self.parameter_schema
        if schema is None:
            raise TypeError(f"tool '{self.name}' takes text, not arguments")
        values, notes = schema.prepare(arguments)
        return Arguments(values, notes)

    def input_kinds(self) -> dict[str, str]:
        """Each parameter's resource kind: its name when that is image/audio/video, else "text"."""
        if self.parameters is None:
            return {"text": "text"}
        return {p: (p if p in _RESOURCE_KINDS else "text") for p in (self.parameters.get("properties") or {})}

    def example_input(self, max_chars: int = 0) -> str:
        """A JSON input the tool takes (at most ``max_chars`` long; 0: whole)."""
        schema = self.parameter_schema
        return schema.example(max_chars) if schema is not None else '"..."'

    def describe_parameters(self, max_chars: int = 400) -> str:
        """The parameters in one compact line (names, types, required, enums, defaults, descriptions)."""
        schema = self.parameter_schema
        return describe_schema(schema.schema, max_chars) if schema is not None else ""

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI function-calling schema."""
        schema = self.parameter_schema
        params = schema.schema if schema is not None else {
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
                 dangerous: bool = False, parameters: Mapping[str, Any] | None = None):
        self.func = func
        self.name = name or func.__name__.replace("_", "-")
        signature = signature_of(func)
        self._converters = {} if parameters is not None else signature.converters
        self._context_parameter = signature.context_parameter
        if parameters is not None and signature.context_parameter in (parameters.get("properties") or {}):
            self._context_parameter = None  # the schema names it: an ordinary argument
        self.needs_context = self._context_parameter is not None
        self.context_argument = self._context_parameter or "context"
        self.parameters = dict(parameters) if parameters is not None else signature.schema
        self.description = (description or signature.description or self.name).strip()
        self.dangerous = dangerous
        self.__doc__ = func.__doc__
        _ = self.parameter_schema  # normalised and checked now: a bad schema fails where the tool is made

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any], func: Callable[..., Any], *,
                        dangerous: bool = False) -> "FunctionTool":
        """See :meth:`Tool.from_function`."""
        if not isinstance(definition, Mapping):
            raise ConfigError(f"a function definition must be a JSON object, not {type(definition).__name__}",
                              key="tools_list")
        function = definition.get("function")
        body = function if isinstance(function, Mapping) else definition
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("a function definition needs a \"name\"", key="tools_list")
        parameters = body.get("parameters", body.get("input_schema", body.get("inputSchema")))
        return cls(func, name=name.strip(), description=str(body.get("description") or name),
                   dangerous=dangerous, parameters=parameters if parameters is not None else {})

    def _run(self, **arguments: Any) -> Any:
        for key, convert in self._converters.items():
            if key in arguments:
                try:
                    arguments[key] = convert(arguments[key])
                except Exception as exc:  # pydantic's ValidationError: the model's input was wrong
                    raise ToolInputError(f"Invalid input for tool '{self.name}': '{key}': {str(exc)[:300]}") from None
        return self.func(**arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


@overload
def tool(func: Callable[..., Any], *, name: str | None = None, description: str | None = None,
         dangerous: bool = False, parameters: Mapping[str, Any] | None = None) -> FunctionTool: ...


@overload
def tool(func: None = None, *, name: str | None = None, description: str | None = None,
         dangerous: bool = False, parameters: Mapping[str, Any] | None = None
         ) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(func: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         dangerous: bool = False, parameters: Mapping[str, Any] | None = None
         ) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a :class:`Tool` from a function; usable bare (``@tool``) or with arguments.

    ``parameters`` is an explicit JSON schema (any common dialect); without it the
    schema comes from the signature and docstring (enums, item types, nested
    dataclasses / TypedDicts / pydantic models and defaults included).
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, dangerous=dangerous, parameters=parameters)

    return wrap(func) if func is not None else wrap


# ---- helpers -----------------------------------------------------------------


def schema_from_function(func: Callable[..., Any]) -> tuple[dict[str, Any], str]:
    """JSON schema of ``func``'s parameters and its description, from signature and docstring."""
    signature = signature_of(func)
    return signature.schema, signature.description


def _plain_value(text: str, kinds: set[str]) -> Any:
    """Plain text for a tool's only parameter: a JSON string literal (``"5"``) is its text when the
    parameter is not text itself, so the schema's coercions see ``5`` rather than the quotes."""
    stripped = text.strip()
    if "string" not in kinds and len(stripped) >= 2 and stripped[0] == stripped[-1] == '"':
        try:
            inner = json.loads(stripped)
        except ValueError:
            return text
        if isinstance(inner, str):
            return inner
    return text


def _as_text(tool_input: Any) -> str:
    if isinstance(tool_input, str):
        return tool_input
    if isinstance(tool_input, Mapping) and len(tool_input) == 1:
        value = next(iter(tool_input.values()))
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if tool_input is None:
        return ""
    return json.dumps(tool_input, ensure_ascii=False, default=str)


def maybe_object(text: str) -> dict[str, Any] | None:
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
