"""The tools that send: ``email`` against a local SMTP server (aiosmtpd), ``sms`` against a local smsbao fake."""

from __future__ import annotations

import json
import logging

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, MissingKeyError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.plugins.email_tool import EmailTool
from chatgpt_tool_hub.tools.plugins.sms import SmsTool, valid_phone
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from helpers import act, answer
from service_fixtures import (  # noqa: F401
    SmtpServer,
    chatbot_kwargs,
    closed_port_url,
    free_port,
    self_signed_cert,
    service_server,
    smtp_server,
)

CODE = "auth-CODE-1234"
SENDER = "bot@example.test"
SMS_KEY = "sms-SECRET-apikey-42"


def email_kwargs(server, **extra):
    return chatbot_kwargs(**{"email_smtp_host": "127.0.0.1", "email_smtp_port": server.port, "email_sender": SENDER,
                             "email_authorization_code": CODE, **extra})


# ---- email ---------------------------------------------------------------------------------------------


def test_email_logs_in_and_sends_to_an_address_and_a_nickname(smtp_server):
    tool = EmailTool.from_config(**email_kwargs(
        smtp_server, email_nickname_mapping='{"fish": "fish@example.test", "team": ["a@example.test", "b@example.test"]}'))
    out = tool.run({"to": "fish, carol@example.test", "subject": "Hi\r\nBcc: evil@example.test",
                    "body": "Wear a coat, it is cold.\n第二行"})
    assert out == "Sent the email 'Hi Bcc: evil@example.test' to fish@example.test, carol@example.test."
    assert out.value == "sent"
    assert smtp_server.logins == [SENDER]
    assert smtp_server.envelopes == [{"mail_from": SENDER, "rcpt_tos": ["fish@example.test", "carol@example.test"]}]
    message = smtp_server.messages[0]
    assert message["From"] == SENDER and message["To"] == "fish@example.test, carol@example.test"
    assert message["Subject"] == "Hi Bcc: evil@example.test" and message["Bcc"] is None  # no header injection
    assert message.get_content().replace("\r\n", "\n").strip() == "Wear a coat, it is cold.\n第二行"
    tool.run({"to": "TEAM", "body": "standup"})  # nicknames: any case; a list sends to each
    assert smtp_server.envelopes[1]["rcpt_tos"] == ["a@example.test", "b@example.test"]


def test_email_takes_0_5_field_names_and_a_dict_mapping(smtp_server):
    tool = EmailTool.from_config(**email_kwargs(smtp_server, email_nickname_mapping={"fish": "fish@example.test"}))
    tool.run(json.dumps({"to_addr": "fish", "subject": "s", "content": "b"}))
    assert smtp_server.envelopes[0]["rcpt_tos"] == ["fish@example.test"]


def test_email_bad_input_is_feedback_for_the_model(smtp_server):
    tool = EmailTool.from_config(**email_kwargs(smtp_server, email_nickname_mapping='{"fish": "f@example.test"}'))
    with pytest.raises(ToolInputError, match=r"'bob' is neither an email address nor a nickname.*nicknames: fish"):
        tool.run({"to": "bob", "body": "x"})
    with pytest.raises(ToolInputError, match="JSON object"):
        tool.run("send fish a hello")
    with pytest.raises(ToolInputError, match="body"):
        tool.run({"to": "fish", "body": "   "})
    assert smtp_server.messages == []


def test_email_wrong_authorization_code_names_the_settings_and_never_shows_it(smtp_server):
    tool = EmailTool.from_config(**email_kwargs(smtp_server, email_authorization_code="wrong-CODE-999"))
    with pytest.raises(ToolExecutionError) as info:
        tool.run({"to": "x@example.test", "body": "hi"})
    text = str(info.value)
    assert "refused the login of bot@example.test" in text and "email_authorization_code" in text
    assert "wrong-CODE-999" not in text and "wrong-CODE-999" not in repr(tool)


def test_email_refused_recipients_and_an_unreachable_server():
    with SmtpServer(users={SENDER: CODE}, refuse={"ghost@example.test"}) as server:
        tool = EmailTool.from_config(**email_kwargs(server))
        with pytest.raises(ToolExecutionError, match=r"refused every recipient: ghost@example.test \(550"):
            tool.run({"to": "ghost@example.test", "body": "hi"})
        assert server.messages == []
        with pytest.raises(ToolExecutionError, match=r"sent, but .* refused some recipients: ghost@example.test"):
            tool.run({"to": "ghost@example.test, real@example.test", "body": "hi"})
        assert server.envelopes[0]["rcpt_tos"] == ["real@example.test"]
    port = free_port()
    tool = EmailTool.from_config(email_smtp_host="127.0.0.1", email_smtp_port=port, email_sender=SENDER,
                                 email_authorization_code=CODE)
    with pytest.raises(ToolExecutionError, match=f"could not reach 127.0.0.1:{port}: connection refused"):
        tool.run({"to": "a@example.test", "body": "hi"})


def test_email_starttls_with_a_certificate_of_its_own_ca(tmp_path):
    cert = self_signed_cert(tmp_path)
    with SmtpServer(tls="starttls", cert=cert, users={SENDER: CODE}) as server:
        kwargs = email_kwargs(server)
        with pytest.raises(ToolExecutionError, match="certificate .* could not be verified.*email_smtp_ca_file"):
            EmailTool.from_config(**kwargs).run({"to": "a@example.test", "body": "hi"})
        tool = EmailTool.from_config(**kwargs, email_smtp_ca_file=str(cert[0]))
        tool.run({"to": "a@example.test", "body": "over TLS"})
        assert server.logins == [SENDER] and server.messages[0].get_content().strip() == "over TLS"


def test_email_port_465_speaks_tls_from_the_start(tmp_path):
    cert = self_signed_cert(tmp_path)
    with SmtpServer(tls="ssl", cert=cert, users={SENDER: CODE}) as server:
        tool = EmailTool.from_config(**email_kwargs(server), email_smtp_security="ssl",
                                     email_smtp_ca_file=str(cert[0]))
        tool.run({"to": "a@example.test", "subject": "tls", "body": "implicit"})
        assert server.messages[0]["Subject"] == "tls"
    with SmtpServer(users={SENDER: CODE}) as plain:  # a plain server on a port told to be TLS
        tool = EmailTool.from_config(**email_kwargs(plain), email_smtp_security="ssl")
        with pytest.raises(ToolExecutionError, match="TLS with 127.0.0.1.* failed.*email_smtp_port"):
            tool.run({"to": "a@example.test", "body": "x"})


def test_email_refuses_to_send_a_password_in_clear_to_a_remote_server():
    class NoTls:
        def ehlo(self):
            pass

        def has_extn(self, name):
            return False

    remote = EmailTool(SENDER, CODE, host="smtp.example.test", port=25)
    with pytest.raises(ToolExecutionError, match="offers no encryption.*email_smtp_security=none"):
        remote._upgrade(NoTls(), "smtp.example.test:25")
    EmailTool(SENDER, CODE, host="smtp.example.test", port=25, security="none")._upgrade(NoTls(), "x")
    EmailTool(SENDER, CODE, host="127.0.0.1", port=25)._upgrade(NoTls(), "x")  # a local relay is fine
    with pytest.raises(ToolExecutionError, match="does not offer STARTTLS"):
        EmailTool(SENDER, CODE, host="127.0.0.1", port=25, security="starttls")._upgrade(NoTls(), "x")


def test_email_settings_are_checked_when_the_tool_is_built():
    with pytest.raises(ConfigError, match="email_sender must be the sender's email address"):
        EmailTool.from_config(email_sender="not an address", email_authorization_code=CODE)
    with pytest.raises(ConfigError, match="email_nickname_mapping must be a JSON object"):
        EmailTool.from_config(email_sender=SENDER, email_authorization_code=CODE, email_nickname_mapping="{oops")
    with pytest.raises(ConfigError, match="email_smtp_security must be one of auto, ssl, starttls, none"):
        EmailTool.from_config(email_sender=SENDER, email_authorization_code=CODE, email_smtp_security="tls1")
    tool = EmailTool.from_config(email_sender=SENDER, email_authorization_code=CODE)
    assert (tool.host, tool.port) == ("smtp.qq.com", 587)  # 0.5's defaults
    assert EmailTool.from_config(email_sender=SENDER, email_authorization_code=CODE,
                                 email_smtp_security="ssl").port == 465


def test_email_in_an_app_needs_its_keys_only_when_listed_and_asks_the_approver(smtp_server):
    llm = ScriptedLLM([])
    AppFactory().create_app(tools_list=["python"], llm=llm, **chatbot_kwargs())  # not listed: no key needed
    with pytest.raises(MissingKeyError, match="tool 'email' needs email_sender"):
        AppFactory().create_app(tools_list=["email"], llm=llm, **chatbot_kwargs())
    asked = []
    llm = ScriptedLLM([act("email", '{"to": "a@example.test", "subject": "s", "body": "b"}'), answer("done")])
    app = AppFactory().create_app(tools_list=["email"], llm=llm,
                                  approve=lambda name, tool_input: asked.append(name) or False,
                                  **email_kwargs(smtp_server, no_default=True))
    result = app.run("mail a")
    assert asked == ["email"] and smtp_server.messages == []
    assert result.steps[0].status == "denied"


# ---- sms -----------------------------------------------------------------------------------------------


def sms_kwargs(server, **extra):
    return chatbot_kwargs(**{"sms_username": "toolhub-user", "sms_apikey": SMS_KEY, "sms_url": server.url + "/sms",
                             **extra})


def test_sms_sends_through_the_smsbao_api(service_server):
    service_server.route("/sms", "0")
    tool = SmsTool.from_config(**sms_kwargs(service_server, sms_nickname_mapping='{"fish": "+86 138-0013-8000"}'))
    out = tool.run({"to": "fish, 13900139000", "body": "天冷多添衣"})
    assert out == "Sent the text message to 13800138000, 13900139000."
    sent = [r["query"] for r in service_server.requests]
    assert [q["m"] for q in sent] == ["13800138000", "13900139000"]
    assert sent[0] == {"u": "toolhub-user", "p": SMS_KEY, "m": "13800138000", "c": "【toolhub】天冷多添衣"}
    assert SMS_KEY not in repr(tool)


def test_sms_status_codes_become_clear_errors_without_the_key(service_server):
    service_server.route("/sms", "30")
    tool = SmsTool.from_config(**sms_kwargs(service_server, sms_signature="我的签名"))
    with pytest.raises(ToolExecutionError, match="13800138000: wrong password or API key; check sms_apikey"):
        tool.run({"phone": "13800138000", "message": "hi"})
    assert service_server.requests[0]["query"]["c"] == "【我的签名】hi"
    service_server.route("/sms", "boom", status=500)
    with pytest.raises(ToolExecutionError) as info:
        tool.run({"to": "13800138000", "body": "hi"})
    assert "HTTP 500" in str(info.value) and SMS_KEY not in str(info.value)
    tool = SmsTool.from_config(**chatbot_kwargs(sms_username="u", sms_apikey=SMS_KEY, sms_url=closed_port_url()))
    with pytest.raises(ToolExecutionError, match="connection refused") as info:
        tool.run({"to": "13800138000", "body": "hi"})
    assert SMS_KEY not in str(info.value)


def test_sms_refuses_numbers_it_cannot_send_to(service_server):
    service_server.route("/sms", "0")
    tool = SmsTool.from_config(**sms_kwargs(service_server))
    with pytest.raises(ToolInputError, match=r"'12345' is neither a mobile phone number"):
        tool.run({"to": "12345", "body": "x"})
    assert valid_phone("+86 138 0013 8000") == "13800138000" and valid_phone("8613800138000") == "13800138000"
    assert valid_phone("+1 212 555 0100") is None
    assert service_server.requests == []


def test_sms_is_dangerous_and_needs_its_keys_when_listed():
    assert SmsTool.dangerous and EmailTool.dangerous
    with pytest.raises(MissingKeyError, match="tool 'sms' needs sms_username"):
        AppFactory().create_app(tools_list=["sms"], llm=ScriptedLLM([]), **chatbot_kwargs())


def test_sms_in_pure_mode_returns_the_error_text(service_server, caplog):
    service_server.route("/sms", "41")
    factory, keys = main_tool_register.get_registered_tool()["sms"]
    assert keys == ["sms_username", "sms_apikey"]
    with caplog.at_level(logging.DEBUG):
        out = factory(**sms_kwargs(service_server)).run(' {"to": "13800138000", "body": "hi"}')
    assert out == "Error: the text message was not sent: 13800138000: the account's balance is too low"
    assert SMS_KEY not in caplog.text
