"""``wolfram-alpha``: answers from Wolfram|Alpha (math, science, units, data).

By default the LLM API (``/api/v1/llm-api``, plain text written for language
models); ``wolfram_alpha_url`` may point at the Short Answers API
(``https://api.wolframalpha.com/v1/result``) or the Spoken Results API
instead, which take the query as ``i`` rather than ``input``. The AppID
travels as the ``appid`` parameter and never appears in an observation.
"""

from __future__ import annotations

from typing import Any

from ...errors import ToolExecutionError
from ...redact import Redactor
from ...runtime.http import HttpSettings, clean_query, fetch, query_schema
from ..base import Tool

__all__ = ["WolframAlphaTool"]

LLM_API_URL = "https://www.wolframalpha.com/api/v1/llm-api"
_SHORT_APIS = ("/v1/result", "/v1/spoken", "/v1/conversation")


class WolframAlphaTool(Tool):
    name = "wolfram-alpha"
    description = (
        "Ask Wolfram|Alpha: math (equations, integrals), science, unit conversions, and facts and data about "
        "places, people, chemistry, finance. Input: a single query in English, e.g. 'integrate x^2 sin x' or "
        "'distance from Earth to Mars'."
    )
    parameters = query_schema("a single Wolfram|Alpha query, in English")

    def __init__(self, appid: str, *, url: str = LLM_API_URL, max_chars: int = 3000,
                 http: HttpSettings | None = None):
        self._appid = "" if appid is None else str(appid).strip()
        self.url = url
        self.max_chars = max(200, int(max_chars))
        self.http = http or HttpSettings()

    @classmethod
    def from_context(cls, context: Any) -> "WolframAlphaTool":
        settings = context.settings
        return cls(
            settings.get("wolfram_alpha_appid", ""),
            url=settings.get("wolfram_alpha_url", LLM_API_URL),
            max_chars=settings.get("wolfram_alpha_max_chars", 3000),
            http=context.http,
        )

    @property
    def short_api(self) -> bool:
        return any(marker in self.url.split("?", 1)[0] for marker in _SHORT_APIS)

    def _run(self, query: str, **_ignored: Any) -> str:
        query = clean_query(query, self.name, "'integrate x^2 sin x'")
        if self.short_api:
            params: dict[str, Any] = {"i": query, "appid": self._appid}
        else:
            params = {"input": query, "appid": self._appid, "maxchars": self.max_chars}
        response = fetch(self.url, params, secrets=(self._appid,), timeout=self.http.timeout,
                         proxy=self.http.proxy, allow_status=(501,), key_names="wolfram_alpha_appid")
        text = Redactor([self._appid]).redact(response.text).strip()
        if response.status == 501:
            detail = f" It said: {text[:600]}" if text else ""
            return (f"Wolfram|Alpha could not interpret '{query}'. Rephrase it as a short, single query in "
                    f"English (e.g. 'France population' rather than 'how many people live in France').{detail}")
        if not text:
            raise ToolExecutionError("Wolfram|Alpha sent an empty answer")
        if len(text) > self.max_chars:
            text = text[: self.max_chars - 1].rstrip() + "…"
        return text
