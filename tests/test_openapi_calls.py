"""OpenAPI tools calling a local echo server: Swagger 2.0 bodies and forms, styles on the wire, body-only
operations (the ChatGPT retrieval plugin's shape), auth from securitySchemes, allow_private lists."""

from __future__ import annotations

import base64
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote

import pytest

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.runtime.netguard import PrivateAllowList, check_url, parse_allow_private
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"
SERVED = {"/.well-known/ai-plugin.json": "retrieval/ai-plugin.json",
          "/.well-known/openapi.yaml": "retrieval/openapi.yaml", "/styles.yaml": "styles.yaml"}


class _Echo(BaseHTTPRequestHandler):
    """Serves some fixtures; answers everything else with what it received."""

    def log_message(self, *args):
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path in SERVED:
            data = (FIXTURES / SERVED[self.path]).read_bytes()
        elif self.path in self.server.extra:
            data = self.server.extra[self.path]
        else:
            data = json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers),
                               "body": raw.decode("utf-8", "replace")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


@pytest.fixture(scope="module")
def echo():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.extra = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


def _call(tool, arguments) -> dict:
    return json.loads(tool.run(arguments))


def _tools(source, **options) -> dict:
    return {t.name.split("-", 1)[1]: t for t in load_openapi_tools(source, allow_private=True, **options)}


# ---- Swagger 2.0 on the wire ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swagger(echo):
    return _tools(str(FIXTURES / "swagger2_petstore.json"), base_url=echo.base + "/v2")


def test_swagger_body_is_sent_as_json(swagger):
    seen = _call(swagger["addPet"], {"name": "Rex", "photoUrls": ["u1"], "status": "available"})
    assert seen["method"] == "POST" and seen["path"] == "/v2/pet"
    assert json.loads(seen["body"]) == {"name": "Rex", "photoUrls": ["u1"], "status": "available"}
    assert seen["headers"]["Content-Type"] == "application/json"
    seen = _call(swagger["createUsersWithArrayInput"], {"body": [{"username": "a"}, {"username": "b"}]})
    assert json.loads(seen["body"]) == [{"username": "a"}, {"username": "b"}]     # an array body stays an array


def test_swagger_collection_formats_on_the_wire(swagger):
    seen = _call(swagger["findPetsByStatus"], {"status": ["available", "sold"], "tags": ["a", "b"], "ids": [1, 2],
                                               "words": ["x", "z"], "limit": 5})
    assert seen["path"] == ("/v2/pet/findByStatus?status=available&status=sold&tags=a,b&ids=1%7C2"
                            "&words=x%20z&limit=5")   # multi, csv, pipes, ssv


def test_swagger_forms_are_sent_as_forms(swagger):
    seen = _call(swagger["updatePetWithForm"], {"petId": 7, "body": {"name": "Rex Jr", "nicknames": ["r", "j"]}})
    assert seen["path"] == "/v2/pet/7"
    assert seen["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert parse_qs(seen["body"]) == {"name": ["Rex Jr"], "nicknames": ["r", "j"]}
    seen = _call(swagger["uploadFile"], {"petId": 7, "body": {"additionalMetadata": "m", "file": "contents"}})
    assert seen["headers"]["Content-Type"].startswith("multipart/form-data; boundary=")
    assert 'name="additionalMetadata"' in seen["body"] and "contents" in seen["body"]


def test_swagger_api_key_from_security_definitions(echo):
    tools = _tools(str(FIXTURES / "swagger2_petstore.json"), base_url=echo.base + "/v2", auth="k-SECRET-1")
    out = tools["getInventory"].run({})
    assert json.loads(out)["headers"]["api_key"] == "***"          # sent in the header the document names ...
    assert "SECRET" not in out                                     # ... and redacted from what comes back


# ---- styles on the wire --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def styles(echo):
    return _tools(f"{echo.base}/styles.yaml")


def test_every_style_reaches_the_server_as_specified(styles):
    seen = _call(styles["everyStyle"], {
        "simple": ["a", "b/c"], "label": ["x", "y"], "matrix": {"R": 1, "G": 2}, "ids": [1, 2], "words": ["w1", "w2"],
        "codes": ["c1", "c2"], "filter": {"color": "red", "size": 3}, "point": {"x": 1, "y": 2}, "next": "/p:2",
        "where": {"a": 1}, "X-Tags": ["t1", "t2"], "X-Point": {"x": 1, "y": 2}, "session": "s1", "prefs": ["p", "q"]})
    path, _, query = seen["path"].partition("?")
    assert path == "/echo/a,b%2Fc/.x,y/;R=1;G=2"
    assert query.split("&") == ["ids=1,2", "words=w1%20w2", "codes=c1%7Cc2", "filter%5Bcolor%5D=red",
                                "filter%5Bsize%5D=3", "x=1", "y=2", "next=/p:2", "where=%7B%22a%22%3A%201%7D"]
    assert json.loads(unquote(query.rsplit("where=", 1)[1])) == {"a": 1}     # a `content` parameter: JSON text
    assert seen["headers"]["X-Tags"] == "t1,t2" and seen["headers"]["X-Point"] == "x=1,y=2"
    assert seen["headers"]["Cookie"] == "session=s1; prefs=p,q"


def test_path_values_stay_in_their_segment(styles):
    seen = _call(styles["putText"], {"id": "../../admin", "body": "hello"})
    assert seen["path"] == "/echo/text/..%2F..%2Fadmin" and seen["body"] == "hello"
    assert seen["headers"]["Content-Type"] == "text/plain; charset=utf-8"
    with pytest.raises(ToolInputError, match="must not be empty"):
        styles["everyStyle"].run({"simple": ["a"], "label": ["."], "matrix": {}})   # label "." -> ".."
    with pytest.raises(ToolInputError, match="line breaks"):
        styles["everyStyle"].run({"simple": ["a"], "label": ["b"], "matrix": {}, "X-Tags": ["a\r\nX-Evil: 1"]})


def test_form_bodies_follow_their_encoding(styles):
    seen = _call(styles["sendForm"], {"name": "a b", "colors": ["red", "blue"], "sizes": ["S", "M"]})
    assert seen["body"] == "name=a%20b&colors=red&colors=blue&sizes=S,M"


# ---- body-only operations: the retrieval plugin ----------------------------------------------------------


def test_retrieval_plugin_query_takes_its_queries(echo):
    tools = load_openapi_tools(f"{echo.base}/.well-known/ai-plugin.json", allow_private=True, auth="tok-SECRET-2")
    query = {t.name: t for t in tools}["retrieval-query_query_post"]
    assert list(query.parameters["properties"]) == ["queries"] and query.parameters["required"] == ["queries"]
    text_protocol_input = '{"queries": [{"query": "What did Alice say?", "top_k": 2}]}'
    seen = json.loads(query.run(text_protocol_input))
    assert json.loads(seen["body"]) == {"queries": [{"query": "What did Alice say?", "top_k": 2}]}
    assert seen["headers"]["Authorization"] == "Bearer ***"        # HTTPBearer, the only scheme
    with pytest.raises(ToolInputError, match="queries"):
        query.run('{"body": [{"query": "x"}]}')                       # the old wrapping is an input error
    delete = {t.name: t for t in tools}["retrieval-delete_docs_delete_delete"]
    assert delete.parameters["required"] == [] and delete.dangerous
    assert json.loads(json.loads(delete.run({"ids": ["d1"]}))["body"]) == {"ids": ["d1"]}
    assert json.loads(delete.run({}))["body"] == "{}"             # a required body is sent even when empty


def test_retrieval_plugin_through_the_text_protocol(echo):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: retrieval-query_query_post\n'
        'Action Input: {"queries": [{"query": "alice"}]}',
        "Thought: Do I need to use a tool? No\nAI: found it",
    ])
    app = AppFactory().create_app(llm=llm, no_default=True, openapi_plugins=[
        {"source": f"{echo.base}/.well-known/ai-plugin.json", "allow_private": True, "auth": "tok-SECRET-3",
         "operations": ["query_query_post"]}])
    result = app.run("what did alice say")
    assert result.output == "found it"
    assert '\\"queries\\": [{\\"query\\": \\"alice\\"}]' in result.steps[0].observation
    assert "SECRET" not in result.steps[0].observation


# ---- auth from securitySchemes --------------------------------------------------------------------------


@pytest.mark.parametrize("auth, check", [
    ({"scheme": "session_cookie", "value": "c-SECRET-1"}, lambda s: "SESSION=c-SECRET-1" in s["headers"]["Cookie"]),
    ({"scheme": "app_key", "value": "q-SECRET-2"}, lambda s: "appKey=q-SECRET-2" in s["path"]),
    ({"scheme": "bearer", "value": "b-SECRET-3"}, lambda s: s["headers"]["Authorization"] == "Bearer b-SECRET-3"),
    ({"scheme": "basic", "username": "u", "password": "p-SECRET-4"},
     lambda s: s["headers"]["Authorization"] == "Basic " + base64.b64encode(b"u:p-SECRET-4").decode()),
    ({"scheme": "basic", "value": "u:p-SECRET-4"},
     lambda s: s["headers"]["Authorization"] == "Basic " + base64.b64encode(b"u:p-SECRET-4").decode()),
    ({"scheme": "header_key", "value": "h-SECRET-5"}, lambda s: s["headers"]["X-API-Key"] == "h-SECRET-5"),
    ("c-SECRET-6", lambda s: s["headers"]["Cookie"] == "SESSION=c-SECRET-6"),       # the first of `security`
    ([{"scheme": "app_key", "value": "q-SECRET-7"}, {"scheme": "header_key", "value": "h-SECRET-8"}],
     lambda s: "appKey=q-SECRET-7" in s["path"] and s["headers"]["X-API-Key"] == "h-SECRET-8"),
    ({"type": "cookie", "name": "sid", "value": "e-SECRET-9"}, lambda s: s["headers"]["Cookie"] == "sid=e-SECRET-9"),
    ({"type": "bearer", "token": "x-SECRET-10"}, lambda s: s["headers"]["Authorization"] == "Bearer x-SECRET-10"),
])
def test_auth_from_security_schemes_is_sent_and_never_shown(echo, auth, check, monkeypatch):
    seen = []
    import chatgpt_tool_hub.tools.plugins.openapi._tool as tool_module

    real = tool_module.send

    def spy(method, url, **kwargs):
        reply = real(method, url, **kwargs)
        seen.append(json.loads(reply.text))
        return reply

    monkeypatch.setattr(tool_module, "send", spy)
    tools = _tools(f"{echo.base}/styles.yaml", auth=auth)
    out = tools["secure"].run({})
    assert check(seen[-1])                                          # what the server got
    assert "SECRET" not in out                                      # what the model sees


@pytest.mark.parametrize("auth, message", [
    ({"scheme": "nope", "value": "v-SECRET"}, "not in the document's securitySchemes .*app_key"),
    ({"scheme": "digest", "value": "v-SECRET"}, "digest.*not supported"),
    ({"scheme": "basic", "value": "v-SECRET"}, "username"),
    ({"scheme": "bearer"}, "needs its secret"),
    ({"type": "oauth", "secret": "v-SECRET"}, "not supported"),
    (42, "must be a dict"),
])
def test_bad_auth_names_the_scheme_never_the_secret(echo, auth, message):
    with pytest.raises(ConfigError, match=message) as info:
        _tools(f"{echo.base}/styles.yaml", auth=auth)
    assert "SECRET" not in str(info.value)


def test_a_bare_secret_needs_one_scheme_to_go_to():
    doc = {"openapi": "3.0.0", "info": {"title": "two", "version": "1"}, "servers": [{"url": "https://t.invalid"}],
           "paths": {"/x": {"get": {"operationId": "x"}}},
           "components": {"securitySchemes": {"a": {"type": "http", "scheme": "bearer"},
                                              "b": {"type": "apiKey", "in": "header", "name": "K"}}}}
    with pytest.raises(ConfigError, match="several securitySchemes.*name one"):
        load_openapi_tools(doc, auth="s-SECRET")
    (tool,) = load_openapi_tools(doc, auth={"scheme": "b", "value": "s-SECRET"})
    assert "K" not in tool.build_request({})["headers"]            # credentials are added only when sending
    assert tool._auth.apply({})["headers"] == {"K": "s-SECRET"}


# ---- allow_private: hosts and networks ------------------------------------------------------------------


def test_allow_private_list_parsing():
    assert parse_allow_private("false") is False and parse_allow_private("yes") is True
    assert parse_allow_private(None) is False
    allowed = parse_allow_private(["10.0.0.0/8", "API.internal.test.", "*.corp.test", "fd00::1"])
    assert allowed.allows("x.example", "10.2.3.4") and not allowed.allows("x.example", "192.168.0.1")
    assert allowed.allows("api.internal.test", "192.168.0.1") and allowed.allows("a.b.corp.test", "127.0.0.1")
    assert not allowed.allows("corp.test.evil", "127.0.0.1") and allowed.allows("x", "fd00::1")
    assert allowed.allows("x", "::ffff:10.0.0.1")                  # an IPv4-mapped address counts as IPv4
    assert parse_allow_private("127.0.0.0/8, localhost").allows("localhost", "::1")
    for bad in (["not a host!"], [1, 2], 3.5):
        with pytest.raises(ValueError):
            parse_allow_private(bad)


def test_check_url_with_an_allow_list():
    assert check_url("http://127.0.0.1:9/x", allow_private=PrivateAllowList(["127.0.0.0/8"])).host == "127.0.0.1"
    with pytest.raises(ToolInputError, match="loopback"):
        check_url("http://127.0.0.1:9/x", allow_private=PrivateAllowList(["10.0.0.0/8"]))


def _resolve_test_names(monkeypatch):
    real = socket.getaddrinfo

    def fake(host, port, *args, **kwargs):
        if str(host).endswith(".internal.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_allow_private_lists_let_only_their_hosts_through(echo, monkeypatch):
    _resolve_test_names(monkeypatch)
    port = echo.server_address[1]
    doc = {"openapi": "3.0.0", "info": {"title": "i", "version": "1"}, "paths": {"/ping": {"get": {"operationId": "p"}}}}
    (tool,) = load_openapi_tools(doc, base_url=f"http://api.internal.test:{port}", allow_private=["api.internal.test"])
    assert json.loads(tool.run({}))["headers"]["Host"] == f"api.internal.test:{port}"
    (other,) = load_openapi_tools(doc, base_url=f"http://db.internal.test:{port}", allow_private=["api.internal.test"])
    with pytest.raises((ToolExecutionError, ToolInputError), match="loopback"):
        other.run({})
    (net,) = load_openapi_tools(doc, base_url=f"http://db.internal.test:{port}", allow_private="127.0.0.0/8")
    assert json.loads(net.run({}))["path"] == "/ping"


def test_allow_private_false_as_text_refuses(echo):
    with pytest.raises(ConfigError, match="loopback.*allow_private"):   # "false" was read as true before
        load_openapi_tools(f"{echo.base}/styles.yaml", allow_private="false")
    with pytest.raises(ConfigError, match="allow_private"):
        load_openapi_tools(f"{echo.base}/styles.yaml", allow_private=["not a host!"])


# ---- references in a document fetched from the web ------------------------------------------------------


def test_a_web_document_never_reads_local_files(echo, tmp_path):
    secret = tmp_path / "local.yaml"
    secret.write_text("Limit: {name: LOCAL-SECRET, in: query}\n")
    doc = {"openapi": "3.0.0", "info": {"title": "w", "version": "1"}, "servers": [{"url": "/"}],
           "paths": {"/a": {"get": {"operationId": "abs", "parameters": [{"$ref": f"{secret}#/Limit"}]}},
                     "/b": {"get": {"operationId": "rel", "parameters": [{"$ref": "local.yaml#/Limit"}]}},
                     "/c": {"get": {"operationId": "file", "parameters": [{"$ref": f"file://{secret}#/Limit"}]}},
                     "/d": {"get": {"operationId": "ok"}}}}
    echo.extra["/web.json"] = json.dumps(doc).encode()
    tools = load_openapi_tools(f"{echo.base}/web.json", allow_private=True)
    assert [t.name for t in tools] == ["w-ok"]
    assert "LOCAL-SECRET" not in json.dumps([t.parameters for t in tools])
