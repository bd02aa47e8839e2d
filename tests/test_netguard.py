"""The SSRF guard: address classification, URL checks, pinned connections (no network)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.runtime.netguard import (
    BlockedURLError,
    CheckedURL,
    HostResolutionError,
    check_url,
    is_blocked_address,
    pinned_session,
)

BLOCKED_ADDRESSES = [
    "127.0.0.1", "127.255.255.254", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
    "100.64.0.1", "100.127.255.254", "0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "240.0.0.1",
    "255.255.255.255", "192.0.2.1", "198.18.0.1",
    "::1", "::", "fe80::1", "fe80::1%eth0", "fc00::1", "fd12:3456::1", "ff02::1", "fec0::1", "2001:db8::1",
    "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",
    "64:ff9b::7f00:1", "64:ff9b::10.0.0.1", "64:ff9b::192.168.0.1", "64:ff9b:1::a00:1",
    "2002:7f00:1::", "2002:c0a8:101::1", "2002:a9fe:a9fe::1",
]
PUBLIC_ADDRESSES = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700::1111", "2001:4860:4860::8888",
                    "64:ff9b::8.8.8.8", "9.9.9.9"]


@pytest.mark.parametrize("address", BLOCKED_ADDRESSES)
def test_non_public_addresses_are_blocked(address):
    reason = is_blocked_address(address)
    assert reason, address


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_public_addresses_pass(address):
    assert is_blocked_address(address) is None


def test_reasons_name_the_kind_of_address():
    assert "loopback" in is_blocked_address("127.0.0.1")
    assert "link-local" in is_blocked_address("169.254.169.254")
    assert "100.64.0.0/10" in is_blocked_address("100.64.0.1")
    assert "IPv4-mapped" in is_blocked_address("::ffff:127.0.0.1")
    assert "NAT64" in is_blocked_address("64:ff9b::a00:1")
    assert "6to4" in is_blocked_address("2002:c0a8:101::1")
    assert "not an IP address" in is_blocked_address("localhost")


# ---- URLs ------------------------------------------------------------------------------------


LOOPBACK_URLS = [
    "http://127.0.0.1/", "http://127.1/", "http://0x7f000001/", "http://2130706433/", "http://0177.0.0.1/",
    "http://127.000.000.001/", "http://0x7f.0.0.1/", "http://127.0.0.1./", "http://[::1]/", "http://[::1]:8080/x",
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/", "http://[0:0:0:0:0:ffff:7f00:1]/",
    "http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::]/", "HTTP://127.0.0.1/", "https://127.0.0.1:443/",
    "http://localhost/", "http://localhost./", "http://[fe80::1]/", "http://169.254.169.254/latest/meta-data/",
    "http://0.0.0.0:8000/", "http://0/", "http://10.1.2.3/", "http://[fc00::1]/", "http://100.64.1.1/",
    "http://１２７.０.０.１/",
]


@pytest.mark.parametrize("url", LOOPBACK_URLS)
def test_private_urls_are_refused(url):
    with pytest.raises(BlockedURLError) as info:
        check_url(url)
    assert "refused" in str(info.value)
    assert isinstance(info.value, ToolInputError)


@pytest.mark.parametrize("url", ["http://127.1/", "http://0x7f000001/", "http://2130706433/", "http://0177.0.0.1/",
                                 "http://127.000.000.001/"])
def test_numeric_spellings_are_normalised(url):
    checked = check_url(url, allow_private=True)
    assert checked.addresses == ("127.0.0.1",)
    assert checked.host == "127.0.0.1" and checked.url == "http://127.0.0.1/"


@pytest.mark.parametrize("url, reason", [
    ("file:///etc/passwd", "'file' scheme"), ("gopher://example.com/", "'gopher' scheme"),
    ("ftp://example.com/x", "'ftp' scheme"), ("data:text/plain,hello", "'data' scheme"),
    ("javascript:alert(1)", "'javascript' scheme"), ("dict://example.com:11211/", "'dict' scheme"),
    ("example.com/page", "no http(s) scheme"), ("localhost:8080", "no http(s) scheme"),
    ("//example.com/x", "no http(s) scheme"), ("http:///path", "no http(s) scheme"), ("", "no URL"),
    ("http://user:pass@example.com/", "credentials"), ("http://user@example.com/", "credentials"),
    ("http://example.com@127.0.0.1/", "credentials"), ("http://evil.com\\@127.0.0.1/", "backslashes"),
    ("http://exa mple.com/", "spaces"), ("http://example.com/\r\nX-Injected: 1", "control characters"),
    ("http://example.com:99999/", "invalid port"), ("http://example.com:0/", "invalid port"),
    ("http://example.com:abc/", "invalid port"),
])
def test_bad_urls_are_refused_with_a_reason(url, reason):
    with pytest.raises(BlockedURLError) as info:
        check_url(url, allow_private=True)
    assert reason in str(info.value)


@pytest.fixture
def fake_dns(monkeypatch):
    """Resolve names from a table; ``*.nip.io``-style names to the address they embed."""
    table: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        name = str(host).rstrip(".").lower()
        if name.endswith(".nip.io"):
            table.setdefault(name, [name[: -len(".nip.io")].split("-")[-1]])
        if name in table:
            out = []
            for address in table[name]:
                fam = socket.AF_INET6 if ":" in address else socket.AF_INET
                sockaddr = (address, port, 0, 0) if fam == socket.AF_INET6 else (address, port)
                out.append((fam, socket.SOCK_STREAM, 6, "", sockaddr))
            return out
        if any(c.isalpha() for c in name.replace(":", "")) and ":" not in name:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, port, family, type, proto, flags)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


def test_names_resolving_to_loopback_are_refused(fake_dns):
    for url in ("http://127.0.0.1.nip.io/", "http://app-127.0.0.1.nip.io:8080/", "http://10.0.0.7.nip.io/"):
        with pytest.raises(BlockedURLError):
            check_url(url)


def test_every_resolved_address_is_checked(fake_dns):
    fake_dns["mixed.example"] = ["93.184.216.34", "10.0.0.5"]
    with pytest.raises(BlockedURLError) as info:
        check_url("https://mixed.example/")
    assert "10.0.0.5" in str(info.value)
    fake_dns["v6.example"] = ["2606:4700::1111", "::ffff:192.168.0.1"]
    with pytest.raises(BlockedURLError):
        check_url("https://v6.example/")


def test_public_names_pass_with_their_addresses(fake_dns):
    fake_dns["www.example.com"] = ["93.184.216.34", "2606:2800:220:1::1"]
    checked = check_url("HTTPS://WWW.Example.COM.:8443/a/b?q=1#frag")
    assert checked == CheckedURL("https://www.example.com:8443/a/b?q=1", "www.example.com", 8443, "https",
                                 ("93.184.216.34", "2606:2800:220:1::1"))
    assert checked.pin_address == "93.184.216.34"
    assert checked.netloc == "www.example.com:8443"


def test_public_literals_pass_without_dns():
    assert check_url("http://8.8.8.8/").addresses == ("8.8.8.8",)
    checked = check_url("https://[2606:4700::1111]/dns")
    assert checked.host == "2606:4700::1111" and checked.port == 443
    assert checked.netloc == "[2606:4700::1111]"


def test_idn_hostnames_are_punycoded(fake_dns):
    fake_dns["xn--bcher-kva.example"] = ["93.184.216.34"]
    checked = check_url("http://Bücher.example/")
    assert checked.host == "xn--bcher-kva.example"
    assert checked.url == "http://xn--bcher-kva.example/"
    fake_dns["xn--bcher-kva.internal"] = ["192.168.0.2"]
    with pytest.raises(BlockedURLError):
        check_url("http://bücher.internal/")


def test_unresolvable_hosts_say_so(fake_dns):
    with pytest.raises(HostResolutionError) as info:
        check_url("http://no-such-host.invalid/")
    assert "could not resolve host no-such-host.invalid" in str(info.value)


def test_allow_private_lets_local_addresses_through():
    checked = check_url("http://127.0.0.1:8080/x", allow_private=True)
    assert checked.addresses == ("127.0.0.1",) and checked.port == 8080


# ---- pinned sessions ---------------------------------------------------------------------------


class _HostEcho(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = (self.headers.get("Host") or "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def echo_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostEcho)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_pinned_session_connects_to_the_checked_address_and_keeps_the_host_header(fake_dns, echo_server):
    fake_dns["pinned.example"] = ["127.0.0.1"]
    checked = check_url(f"http://pinned.example:{echo_server}/", allow_private=True)
    fake_dns["pinned.example"] = ["10.9.9.9"]  # a second lookup would go elsewhere
    with pinned_session(checked) as session:
        response = session.get(checked.url, timeout=5)
    assert response.text == f"pinned.example:{echo_server}"


def test_pinned_session_refuses_hosts_that_were_not_checked(echo_server):
    with pinned_session() as session:
        with pytest.raises(BlockedURLError):
            session.get(f"http://127.0.0.1:{echo_server}/", timeout=5)


def test_pinned_session_ignores_proxy_environment(monkeypatch, echo_server):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    checked = check_url(f"http://127.0.0.1:{echo_server}/", allow_private=True)
    with pinned_session(checked) as session:
        assert session.get(checked.url, timeout=5).status_code == 200


def _make_cert(tmp_path, hostname):
    x509 = pytest.importorskip("cryptography.x509")
    import datetime

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.fixture
def tls_server(tmp_path):
    import ssl

    cert, key = _make_cert(tmp_path, "secure.example")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostEcho)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    sni: list = []
    context.sni_callback = lambda sock, name, ctx: sni.append(name)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], cert, sni
    server.shutdown()
    server.server_close()


def test_pinned_tls_uses_the_hostname_for_sni_and_certificate(fake_dns, tls_server):
    port, cert, sni = tls_server
    fake_dns["secure.example"] = ["127.0.0.1"]
    checked = check_url(f"https://secure.example:{port}/", allow_private=True)
    with pinned_session(checked) as session:
        response = session.get(checked.url, timeout=5, verify=cert)
    assert response.text == f"secure.example:{port}"
    assert sni == ["secure.example"]


def test_pinned_tls_rejects_a_certificate_for_another_name(fake_dns, tls_server):
    port, cert, _ = tls_server
    fake_dns["other.example"] = ["127.0.0.1"]
    checked = check_url(f"https://other.example:{port}/", allow_private=True)
    with pinned_session(checked) as session:
        with pytest.raises(requests.exceptions.SSLError):
            session.get(checked.url, timeout=5, verify=cert)
