"""What each OpenAI-compatible server accepts, decided once per client: a capability table.

Servers that speak the chat-completions API differ in small ways that break a
request outright: llama-cpp-python's server answers HTTP 500 to an assistant
tool-call turn whose ``content`` is ``null``; some servers refuse a message whose
content is a list of text parts; constrained decoding is spelled differently
by each (llama.cpp takes a JSON schema under ``response_format`` as
``json_object`` with a ``schema``, TGI as ``json_object`` with a ``value``,
vLLM, Ollama and LM Studio OpenAI's ``json_schema``). The client reads the
message encoding and the constraint's spelling from the :class:`ServerProfile`
of its server, never by trying a form on the user's request.

Which server it is comes from the ``llm_server`` setting, or (``auto``) from
the base URL (OpenAI's and Azure's hosts, Ollama's port 11434, LM Studio's
1234, LiteLLM's 4000), else from one ``GET /models`` made the first time the
answer matters (:func:`classify`): each server marks its model list in its
own way (``owned_by``, extra fields, response headers). A server that cannot
be told apart gets the ``generic`` profile: the encoding every server accepts,
and no constrained decoding unless it is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from ..errors import ConfigError

__all__ = ["ServerProfile", "PROFILES", "SERVER_NAMES", "profile_named", "guess_from_url", "classify",
           "encode_messages", "constraint_params"]


@dataclass(frozen=True)
class ServerProfile:
    """What one kind of server accepts.

    ``call_turn_content``: the ``content`` of an assistant turn that holds tool calls and no text:
    ``""``, or None to send ``null`` (OpenAI's own form). ``text_parts``: a message's content may be a
    list of text parts (else a list of text parts only is sent as one string). ``constraint``: how a JSON
    schema that constrains the reply is sent (see :func:`constraint_params`), None when the server has no
    constrained decoding. ``constrain_by_default``: ``constrained_decoding=auto`` turns it on (servers
    that run small local models, where it is the difference between a readable action and none).
    ``max_tokens``: the limit sent when none is set (llama.cpp's servers otherwise write until the context
    is full: a small model that repeats itself would hold the request for minutes).
    """

    name: str
    label: str
    call_turn_content: str | None = ""
    text_parts: bool = True
    constraint: str | None = None
    constrain_by_default: bool = False
    tool_choice: bool = True
    stream_options: bool = True
    max_tokens: int | None = None  # sent when no limit is set: servers whose own default is the whole context


PROFILES: dict[str, ServerProfile] = {p.name: p for p in (
    ServerProfile("openai", "OpenAI", call_turn_content=None, constraint="json_schema"),
    ServerProfile("azure", "Azure OpenAI", call_turn_content=None, constraint="json_schema"),
    ServerProfile("llama.cpp", "llama.cpp llama-server", constraint="json_object_schema", constrain_by_default=True,
                  max_tokens=1024),
    ServerProfile("llama-cpp-python", "llama-cpp-python's server", text_parts=False,
                  constraint="json_object_schema", constrain_by_default=True, stream_options=False, max_tokens=1024),
    ServerProfile("vllm", "vLLM", constraint="json_schema", constrain_by_default=True),
    ServerProfile("ollama", "Ollama (OpenAI endpoint)", constraint="json_schema", constrain_by_default=True),
    ServerProfile("lmstudio", "LM Studio", constraint="json_schema", constrain_by_default=True),
    ServerProfile("tgi", "Hugging Face TGI (Messages API)", constraint="json_object_value",
                  constrain_by_default=True, stream_options=False),
    ServerProfile("litellm", "LiteLLM proxy", constraint="json_schema"),
    ServerProfile("generic", "an OpenAI-compatible server", text_parts=False, constraint="json_schema"),
)}
SERVER_NAMES = ("auto", *PROFILES)
_ALIASES = {"llamacpp": "llama.cpp", "llama-server": "llama.cpp", "llama_cpp": "llama-cpp-python",
            "llama-cpp": "llama.cpp", "lm-studio": "lmstudio", "lm_studio": "lmstudio",
            "text-generation-inference": "tgi", "azure-openai": "azure", "openai-compatible": "generic"}
_PORTS = {11434: "ollama", 1234: "lmstudio", 4000: "litellm"}


def profile_named(name: str) -> ServerProfile | None:
    """The profile called ``name`` (a few common spellings too); None for ``auto``; a ConfigError that lists
    the names for an unknown one."""
    key = (name or "auto").strip().lower()
    key = _ALIASES.get(key, key)
    if key == "auto":
        return None
    try:
        return PROFILES[key]
    except KeyError:
        raise ConfigError(f"llm_server / LLM_SERVER must be one of {', '.join(SERVER_NAMES)}, not {name!r}",
                          key="llm_server") from None


def guess_from_url(base_url: str | None, *, azure: bool = False) -> ServerProfile | None:
    """The profile the base URL names without asking the server: OpenAI's and Azure's hosts and the default
    ports of Ollama, LM Studio and LiteLLM; None when the URL does not tell."""
    if azure:
        return PROFILES["azure"]
    if not base_url:
        return PROFILES["openai"]
    try:
        parts = urlsplit(base_url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return PROFILES["generic"]
    if host == "openai.com" or host.endswith(".openai.com"):
        return PROFILES["openai"]
    if host.endswith(".openai.azure.com"):
        return PROFILES["azure"]
    if port in _PORTS:
        return PROFILES[_PORTS[port]]
    return None


def classify(body: Any, headers: Mapping[str, str] | None = None) -> ServerProfile:
    """The profile of the server whose ``GET /models`` answered ``body`` with ``headers``.

    llama.cpp's llama-server marks its models ``owned_by: llamacpp``; llama-cpp-python's ``owned_by: me``;
    vLLM ``owned_by: vllm`` (and ``max_model_len``); LM Studio ``organization_owner``; Ollama ``library``
    or ``ollama``; TGI ``owned_by`` its model id with an ``x-compute-type`` header; LiteLLM sends
    ``x-litellm-*`` headers. Anything else is ``generic``."""
    lowered = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    if any(k.startswith("x-litellm") for k in lowered):
        return PROFILES["litellm"]
    if "x-compute-type" in lowered or "text-generation-inference" in lowered.get("server", "").lower():
        return PROFILES["tgi"]
    models = body.get("data") if isinstance(body, Mapping) else None
    entries = [m for m in models if isinstance(m, Mapping)] if isinstance(models, list) else []
    owners = {str(m.get("owned_by") or "").lower() for m in entries}
    if "llamacpp" in owners or (isinstance(body, Mapping) and "models" in body and entries
                                and any("meta" in m for m in entries)):
        return PROFILES["llama.cpp"]
    if "vllm" in owners or any("max_model_len" in m for m in entries):
        return PROFILES["vllm"]
    if "me" in owners:
        return PROFILES["llama-cpp-python"]
    if owners & {"library", "ollama"}:
        return PROFILES["ollama"]
    if "organization_owner" in owners:
        return PROFILES["lmstudio"]
    if owners & {"tgi", "text-generation-inference"}:
        return PROFILES["tgi"]
    return PROFILES["generic"]


# --- what is sent ---------------------------------------------------------------------------------


def encode_messages(messages: Sequence[Any], profile: ServerProfile) -> list[Any]:
    """``messages`` as ``profile``'s server accepts them (a new list; messages that need no change are the
    same objects): the content of an assistant tool-call turn without text, and text-only part lists."""
    out = list(messages)
    for i, message in enumerate(out):
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if message.get("tool_calls") and not content:
            if content != profile.call_turn_content:
                out[i] = {**message, "content": profile.call_turn_content}
        elif isinstance(content, list) and not profile.text_parts and _text_only(content):
            out[i] = {**message, "content": "".join(str(p.get("text") or "") for p in content)}
    return out


def _text_only(parts: list) -> bool:
    return all(isinstance(p, Mapping) and p.get("type", "text") == "text" for p in parts)


def constraint_params(schema: Mapping[str, Any], profile: ServerProfile) -> dict[str, Any]:
    """The request parameters that make ``profile``'s server keep its reply to ``schema`` (empty when it
    has no constrained decoding)."""
    kind = profile.constraint
    if kind == "json_object_schema":  # llama.cpp and llama-cpp-python: the schema becomes a grammar
        return {"response_format": {"type": "json_object", "schema": dict(schema)}}
    if kind == "json_object_value":  # TGI
        return {"response_format": {"type": "json_object", "value": dict(schema)}}
    if kind == "json_schema":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "reply", "schema": dict(schema), "strict": False}}}
    return {}
