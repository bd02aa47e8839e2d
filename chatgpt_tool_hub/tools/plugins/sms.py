"""``sms``: send a text message to a mobile phone in mainland China through smsbao (dangerous).

The API chatgpt-tool-hub 0.5 used (smsbao's HTTP interface): ``GET
{sms_url}?u=<sms_username>&p=<sms_apikey>&m=<phone>&c=<content>``, answered by
a status code in plain text (``0`` = sent). The content carries a signature
in 【】 (``sms_signature``, the one the account registered). The key travels
as the ``p`` query parameter and never appears in an observation or a log
line. ``sms_nickname_mapping`` maps names to phone numbers.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ...errors import ToolExecutionError, ToolInputError
from ...runtime.http import HttpSettings, fetch
from ..base import Tool, ToolResult
from ._recipients import message_arguments, parse_mapping, resolve_recipients

__all__ = ["SmsTool", "SMS_URL", "STATUS", "valid_phone"]

SMS_URL = "https://api.smsbao.com/sms"
MAX_CHARS = 500
# smsbao's status codes
STATUS = {
    "0": "sent",
    "-1": "the request lacks a parameter",
    "-2": "the service cannot be used from this server",
    "30": "wrong password or API key; check sms_apikey",
    "40": "the account does not exist; check sms_username",
    "41": "the account's balance is too low",
    "42": "the account has expired",
    "43": "this IP address is not allowed to send",
    "50": "the content contains words the service refuses",
    "51": "the phone number is wrong",
}
_PHONE = re.compile(r"^1\d{10}$")


def valid_phone(text: str) -> str | None:
    """A mainland China mobile number (11 digits from 1; ``+86``, spaces and dashes allowed), or ``None``."""
    digits = re.sub(r"[\s\-()]", "", str(text))
    if digits.startswith("+86"):
        digits = digits[3:]
    elif digits.startswith("86") and len(digits) == 13:
        digits = digits[2:]
    return digits if _PHONE.match(digits) else None


class SmsTool(Tool):
    name = "sms"
    dangerous = True
    egress = "network"  # every call sends data out
    description = (
        "Send a short text message to a mobile phone in mainland China. Input: a JSON object "
        "{\"to\": \"<phone number or nickname; several separated by commas>\", \"body\": \"<the message>\"}. "
        "Write the message yourself from what the user asked; keep it short."
    )
    parameters = {
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "phone number(s) or nickname(s), separated by commas"},
            "body": {"type": "string", "description": "the message text"},
        },
        "required": ["to", "body"],
    }

    def __init__(self, username: str, api_key: str, *, url: str = SMS_URL, signature: str = "toolhub",
                 nickname_mapping: Any = None, http: HttpSettings | None = None):
        self.username = str(username or "").strip()
        self._key = "" if api_key is None else str(api_key).strip()
        self.url = url
        self.signature = str(signature or "").strip().strip("【】")
        self.nicknames = parse_mapping(nickname_mapping, "sms_nickname_mapping")
        self.http = http or HttpSettings()

    @classmethod
    def from_context(cls, context: Any) -> "SmsTool":
        settings = context.settings
        return cls(
            settings.get("sms_username", ""),
            settings.get("sms_apikey", ""),
            url=settings.get("sms_url", SMS_URL),
            signature=settings.get("sms_signature", "toolhub"),
            nickname_mapping=settings.get("sms_nickname_mapping"),
            http=context.http,
        )

    def __repr__(self) -> str:  # never the key
        return f"<SmsTool {self.name!r} account={self.username!r}>"

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        return message_arguments(self, tool_input, {"to": ("to_addr", "phone", "phones", "number", "recipient"),
                                                    "body": ("content", "text", "message")},
                                 '{"to": "13800000000", "body": "..."}')

    def _run(self, to: str, body: str, **_ignored: Any) -> str:
        phones = resolve_recipients(to, self.nicknames, normalise=valid_phone,
                                    kind="a mobile phone number (11 digits, mainland China)",
                                    key="sms_nickname_mapping", example='"13800000000"')
        body = " ".join(str(body or "").split())
        if not body:
            raise ToolInputError("the message is empty; write its text into \"body\"")
        if len(body) > MAX_CHARS:
            raise ToolInputError(f"the message is {len(body)} characters long; send at most {MAX_CHARS}")
        content = body if body.startswith("【") or not self.signature else f"【{self.signature}】{body}"
        sent, failed = [], []
        for phone in phones:
            response = fetch(self.url, {"u": self.username, "p": self._key, "m": phone, "c": content},
                             secrets=(self._key,), timeout=self.http.timeout, proxy=self.http.proxy,
                             key_names="sms_username and sms_apikey")
            code = response.text.strip()
            if code == "0":
                sent.append(phone)
            else:
                failed.append(f"{phone}: {STATUS.get(code, f'the service answered {code[:60]!r}')}")
        if failed and not sent:
            raise ToolExecutionError("the text message was not sent: " + "; ".join(failed))
        text = f"Sent the text message to {', '.join(sent)}."
        if failed:
            text += " Not sent to " + "; ".join(failed) + "."
        return ToolResult(text, value="sent")
