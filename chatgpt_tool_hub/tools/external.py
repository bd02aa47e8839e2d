"""``ExternalTool``: a tool the caller runs (a chat client's own function), offered to the model like any other.

The engine never runs one: a call of it pauses the run (see
:mod:`chatgpt_tool_hub.run.external`) once its arguments follow the tool's
schema. ``run`` is reached only with arguments that do not (``parse_arguments``
refuses them, and the model is told what was wrong) or outside an engine.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ConfigError, ToolInputError
from .base import Tool

__all__ = ["ExternalTool"]


class ExternalTool(Tool):
    """A function the caller runs: OpenAI's ``{"name", "description", "parameters"}`` (or the same wrapped as
    ``{"type": "function", "function": {...}}``)."""

    external = True

    def __init__(self, name: str, description: str = "", parameters: Mapping[str, Any] | None = None):
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("a function needs a \"name\"", key="tools")
        self.name = name.strip()
        self.description = (description or self.name).strip()
        self.parameters = dict(parameters) if parameters is not None else {"type": "object", "properties": {}}
        self.allow_extra_arguments = not self.parameters.get("properties")  # no schema given: anything goes
        _ = self.parameter_schema  # normalised and checked now: a bad schema fails where the tool is made

    @classmethod
    def from_openai(cls, definition: Mapping[str, Any]) -> "ExternalTool":
        """The tool of one entry of OpenAI's ``tools`` list (or a bare function definition)."""
        if not isinstance(definition, Mapping):
            raise ConfigError("a tool must be a JSON object {\"type\": \"function\", \"function\": {...}}", key="tools")
        function = definition.get("function")
        body = function if isinstance(function, Mapping) else definition
        parameters = body.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ConfigError(f"the parameters of function {body.get('name')!r} must be a JSON schema object",
                              key="tools")
        return cls(str(body.get("name") or ""), str(body.get("description") or ""), parameters)

    def arguments_for(self, tool_input: Any) -> dict[str, Any]:
        """The call's arguments checked against the schema (``ToolInputError`` says what is wrong)."""
        return dict(self.parse_arguments(tool_input))

    def _run(self, **arguments: Any) -> Any:
        raise ToolInputError(f"the tool '{self.name}' is run by the caller, not here")
