"""``email``: send an email over SMTP (dangerous: the app's approver is asked before every call).

The settings are the ones chatgpt-on-wechat's plugin passes: ``email_smtp_host``
(default ``smtp.qq.com``), ``email_smtp_port``, ``email_sender``,
``email_authorization_code`` (the SMTP password; many providers issue a
separate "authorization code" for it) and ``email_nickname_mapping``.

Encryption follows the port unless ``email_smtp_security`` says otherwise:
465 is SMTP over TLS from the first byte; any other port starts in plain text
and upgrades with STARTTLS. Without STARTTLS on offer the tool refuses to log
in, except on a loopback address (a local relay) or with
``email_smtp_security=none``. Certificates are verified (``email_smtp_ca_file``
adds a CA of your own).
"""

from __future__ import annotations

import ipaddress
import re
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.utils import formataddr, formatdate, make_msgid
from typing import Any, Mapping

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ...redact import Redactor
from ..base import Tool, ToolResult
from ._recipients import message_arguments, parse_mapping, resolve_recipients

__all__ = ["EmailTool", "SECURITY_MODES", "valid_address"]

SECURITY_MODES = ("auto", "ssl", "starttls", "none")
DEFAULT_HOST = "smtp.qq.com"
_ADDRESS = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                      r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$")
MAX_BODY_CHARS = 100_000


def valid_address(text: str) -> str | None:
    """``text`` as an email address (``Name <a@b.c>`` gives ``a@b.c``), or ``None``."""
    match = re.fullmatch(r"[^<>]*<([^<>]+)>", text.strip())
    address = (match.group(1) if match else text).strip()
    return address if _ADDRESS.match(address) else None


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EmailTool(Tool):
    name = "email"
    dangerous = True
    egress = "network"  # every call sends data out
    description = (
        "Send an email. Input: a JSON object {\"to\": \"<address or nickname; several separated by commas>\", "
        "\"subject\": \"...\", \"body\": \"...\"}. Write the subject and body yourself from what the user asked."
    )
    parameters = {
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "recipient address(es) or nickname(s), separated by commas"},
            "subject": {"type": "string", "description": "the subject line"},
            "body": {"type": "string", "description": "the message text"},
        },
        "required": ["to", "body"],
    }

    def __init__(self, sender: str, authorization_code: str = "", *, host: str = DEFAULT_HOST,
                 port: int | None = None, security: str = "auto", nickname_mapping: Any = None,
                 sender_name: str = "", ca_file: str | None = None, timeout: float = 15.0):
        address = valid_address(str(sender or ""))
        if address is None:
            raise ConfigError(f"email_sender must be the sender's email address, got {str(sender)[:60]!r}",
                              key="email_sender")
        self.sender: str = address
        self._code = "" if authorization_code is None else str(authorization_code)
        self.host = str(host or DEFAULT_HOST).strip()
        security = str(security or "auto").strip().lower()
        if security not in SECURITY_MODES:
            raise ConfigError(f"email_smtp_security must be one of {', '.join(SECURITY_MODES)}, got {security[:20]!r}",
                              key="email_smtp_security")
        self.security = security
        self.port = int(port) if port else (465 if security == "ssl" else 25 if security == "none" else 587)
        self.nicknames = parse_mapping(nickname_mapping, "email_nickname_mapping")
        self.sender_name = " ".join(str(sender_name or "").split())
        self.ca_file = ca_file or None
        self.timeout = float(timeout)

    @classmethod
    def from_context(cls, context: Any) -> "EmailTool":
        settings = context.settings
        return cls(
            settings.get("email_sender", ""),
            settings.get("email_authorization_code", ""),
            host=settings.get("email_smtp_host", DEFAULT_HOST),
            port=settings.get("email_smtp_port", 0) or None,
            security=settings.get("email_smtp_security", "auto"),
            nickname_mapping=settings.get("email_nickname_mapping"),
            sender_name=settings.get("email_sender_name", ""),
            ca_file=settings.get("email_smtp_ca_file", None),
            timeout=settings.get("email_smtp_timeout", context.http.timeout),
        )

    def __repr__(self) -> str:  # never the authorization code
        return f"<EmailTool {self.name!r} {self.sender} via {self.host}:{self.port}>"

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        return message_arguments(self, tool_input, {"to": ("to_addr", "recipient", "recipients", "address"),
                                                    "body": ("content", "text", "message"), "subject": ("title",)},
                                 '{"to": "alice@example.com", "subject": "Hello", "body": "..."}')

    def _run(self, to: str, body: str, subject: str = "", **_ignored: Any) -> str:
        recipients = resolve_recipients(to, self.nicknames, normalise=valid_address, kind="an email address",
                                        key="email_nickname_mapping", example='"alice@example.com"')
        body = str(body or "").strip()
        if not body:
            raise ToolInputError("the email has no body; write the message text into \"body\"")
        if len(body) > MAX_BODY_CHARS:
            raise ToolInputError(f"the body is {len(body)} characters long; at most {MAX_BODY_CHARS} are sent")
        subject = " ".join(str(subject or "").split())[:200]
        message = EmailMessage()
        message["From"] = formataddr((self.sender_name, self.sender)) if self.sender_name else self.sender
        message["To"] = ", ".join(recipients)
        message["Subject"] = subject
        message["Date"] = formatdate(localtime=True)
        message["Message-ID"] = make_msgid(domain=self.sender.split("@", 1)[1])
        message.set_content(body)
        self._send(message, recipients)
        what = f"'{subject}'" if subject else "(no subject)"
        return ToolResult(f"Sent the email {what} to {', '.join(recipients)}.", value="sent")

    # ---- SMTP ------------------------------------------------------------------

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        if self.ca_file:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ToolExecutionError(f"email_smtp_ca_file could not be read: {exc}") from None
        return context

    def _send(self, message: EmailMessage, recipients: list[str]) -> None:
        where = f"{self.host}:{self.port}"
        secrets = Redactor([self._code])
        try:
            if self.security == "ssl" or (self.security == "auto" and self.port == 465):
                client: smtplib.SMTP = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout,
                                                        context=self._context())
            else:
                client = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            with client:
                if not isinstance(client, smtplib.SMTP_SSL):
                    self._upgrade(client, where)
                if self._code:
                    client.login(self.sender, self._code)
                refused = client.send_message(message, from_addr=self.sender, to_addrs=recipients)
        except ToolExecutionError:
            raise
        except smtplib.SMTPAuthenticationError as exc:
            raise ToolExecutionError(
                f"the SMTP server {where} refused the login of {self.sender} ({_reply(exc, secrets)}); check "
                f"email_sender and email_authorization_code (many providers, QQ Mail and Gmail among them, want "
                f"an authorization code or app password there, not the account's login password)") from None
        except smtplib.SMTPRecipientsRefused as exc:
            refused_all = ", ".join(f"{r} ({_reply(e, secrets)})" for r, e in exc.recipients.items())
            raise ToolExecutionError(f"the SMTP server {where} refused every recipient: {refused_all}") from None
        except smtplib.SMTPSenderRefused as exc:
            raise ToolExecutionError(f"the SMTP server {where} refused the sender {self.sender} "
                                     f"({_reply(exc, secrets)}); check email_sender") from None
        except smtplib.SMTPResponseException as exc:
            raise ToolExecutionError(f"the SMTP server {where} refused the email ({_reply(exc, secrets)})") from None
        except (smtplib.SMTPServerDisconnected, smtplib.SMTPException) as exc:
            raise ToolExecutionError(f"the SMTP conversation with {where} failed: {secrets.redact(str(exc))[:200]}"
                                     ) from None
        except ssl.SSLCertVerificationError as exc:
            raise ToolExecutionError(f"the certificate of {where} could not be verified ({exc.verify_message}); "
                                     f"check email_smtp_host, or set email_smtp_ca_file to the CA that signed it"
                                     ) from None
        except ssl.SSLError as exc:
            raise ToolExecutionError(f"TLS with {where} failed ({exc.reason or exc}); 465 speaks TLS from the "
                                     f"start, 587 and 25 use STARTTLS: check email_smtp_port and "
                                     f"email_smtp_security") from None
        except socket.gaierror:
            raise ToolExecutionError(f"could not reach {where}: the host name could not be resolved "
                                     f"(check email_smtp_host, or the network)") from None
        except ConnectionRefusedError:
            raise ToolExecutionError(f"could not reach {where}: connection refused (check email_smtp_host and "
                                     f"email_smtp_port)") from None
        except (TimeoutError, socket.timeout):
            raise ToolExecutionError(f"could not reach {where}: no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise ToolExecutionError(f"could not reach {where}: {exc.strerror or exc}") from None
        if refused:
            some = ", ".join(f"{r} ({_reply(e, secrets)})" for r, e in refused.items())
            raise ToolExecutionError(f"the email was sent, but {where} refused some recipients: {some}")

    def _upgrade(self, client: smtplib.SMTP, where: str) -> None:
        """STARTTLS where the mode asks for it or the server offers it; refuse to send a password in clear."""
        client.ehlo()
        offered = client.has_extn("starttls")
        if self.security == "none":
            return
        if offered:
            client.starttls(context=self._context())
            client.ehlo()
            return
        if self.security == "starttls":
            raise ToolExecutionError(f"the SMTP server {where} does not offer STARTTLS "
                                     f"(email_smtp_security=starttls); check email_smtp_port (465: TLS from the start)")
        if self._code and not _is_loopback(self.host):
            raise ToolExecutionError(
                f"the SMTP server {where} offers no encryption, so the password would travel in clear: use its "
                f"TLS port (email_smtp_port=465), or set email_smtp_security=none to send anyway")


def _reply(exc: Exception | tuple[int, bytes], secrets: Redactor) -> str:
    code = getattr(exc, "smtp_code", None)
    text = getattr(exc, "smtp_error", b"")
    if isinstance(exc, tuple) and len(exc) == 2:  # a (code, message) pair of a refused recipient
        code, text = exc
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = " ".join(secrets.redact(str(text or "")).split())[:200]
    return f"{code} {text}".strip() if code else text or "no reason given"
