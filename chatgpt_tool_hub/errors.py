"""One error tree with three families.

* :class:`ModelFeedbackError` — goes back to the model as an observation or as
  parser feedback (bad tool input, tool failure, malformed output).
* :class:`UserError` — a developer mistake (bad configuration, empty question,
  unknown tool name). Raised to the caller, never sent to the model.
* :class:`RunError` — the run itself failed (LLM unreachable, bad credentials,
  budget exhausted).

Messages never contain secrets: they name the setting to fix, never its value.
"""

from __future__ import annotations

__all__ = [
    "ToolHubError",
    "ModelFeedbackError",
    "OutputParserError",
    "ToolInputError",
    "ToolExecutionError",
    "UserError",
    "ConfigError",
    "MissingKeyError",
    "RunError",
    "LLMError",
    "LLMConnectionError",
    "LLMAuthError",
    "LLMResponseError",
]


class ToolHubError(Exception):
    """Base class of every error raised by chatgpt_tool_hub."""


# --- family 1: back to the model -------------------------------------------------


class ModelFeedbackError(ToolHubError):
    """An error whose message is meant for the LLM, not for the developer."""


class OutputParserError(ModelFeedbackError, ValueError):
    """The LLM's output could not be read as an action or a final answer.

    ``feedback`` is the message the engine sends back to the LLM; it names the
    exact format that was broken. ``llm_output`` is the raw text.
    """

    def __init__(self, message: str, *, feedback: str | None = None, llm_output: str = ""):
        super().__init__(message)
        self.feedback = feedback or message
        self.llm_output = llm_output


class ToolInputError(ModelFeedbackError, ValueError):
    """A tool got input of the wrong shape; the message says what was wrong."""


class ToolExecutionError(ModelFeedbackError):
    """A tool failed while running; the message becomes the observation."""


# --- family 2: developer mistakes ------------------------------------------------


class UserError(ToolHubError, ValueError):
    """The caller used the library wrongly; the message says how to fix it."""


class ConfigError(UserError):
    """A configuration value is missing or invalid. ``key`` names the setting."""

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.key = key


class MissingKeyError(ConfigError):
    """A tool that was asked for needs a key that is not set."""


# --- family 3: run failures ------------------------------------------------------


class RunError(ToolHubError):
    """A run could not complete."""


class LLMError(RunError):
    """The LLM backend failed."""


class LLMConnectionError(LLMError):
    """The LLM endpoint could not be reached (after retries)."""


class LLMAuthError(LLMError):
    """The endpoint refused the request (401/403/404): a setting is wrong."""


class LLMResponseError(LLMError):
    """The endpoint answered with something that is not a usable completion."""
