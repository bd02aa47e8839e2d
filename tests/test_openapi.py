"""OpenAPI plugins: documents → tools, calls against a local API server, auth, safety."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"
PETS = [{"id": 1, "name": "Tom", "tag": "cat"}, {"id": 2, "name": "Rex", "tag": "dog"}]


class _Handler(BaseHTTPRequestHandler):
    """Serves the fixture documents and implements the petstore and todo APIs."""

    def log_message(self, *args):  # keep test output quiet
        pass

    def _reply(self, status: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (
            json.dumps(body).encode() if content_type == "application/json" else str(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self.server.seen.append({"method": method, "path": self.path, "headers": dict(self.headers), "body": raw})
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        files = {"/openapi.json": "petstore.json", "/openapi.yaml": "todo.yaml",
                 "/.well-known/ai-plugin.json": "ai-plugin.json", "/swagger.json": "swagger2.json"}
        if method == "GET" and url.path in files:
            kind = "application/yaml" if url.path.endswith(".yaml") else "application/json"
            return self._reply(200, (FIXTURES / files[url.path]).read_bytes(), kind)
        if url.path == "/api/pets" and method == "GET":
            pets = [p for p in PETS if "tag" not in query or p["tag"] == query["tag"][0]]
            return self._reply(200, pets[: int(query.get("limit", ["100"])[0])])
        if url.path == "/api/pets" and method == "POST":
            return self._reply(201, {"id": 3, **json.loads(raw)})
        if url.path.startswith("/api/pets/"):
            pet_id = url.path.rsplit("/", 1)[1]
            if method == "DELETE":
                return self._reply(204, b"")
            match = [p for p in PETS if str(p["id"]) == pet_id]
            return self._reply(200, match[0]) if match else self._reply(404, {"error": "no such pet", "id": pet_id})
        if url.path == "/api/echo":
            return self._reply(200, {"headers": dict(self.headers), "query": query})
        if url.path == "/api/fail":
            return self._reply(500, "the database is on fire", "text/plain")
        if url.path == "/api/big":
            return self._reply(200, "A" * 30000 + "THE-END", "text/plain")
        if url.path == "/api/health":
            return self._reply(200, "ok", "text/plain")
        if url.path == "/v1/todos":
            return self._reply(200, {"query": query})
        if url.path.startswith("/v1/todos/") and method == "PATCH":
            return self._reply(200, {"id": url.path.rsplit("/", 1)[1], "patch": json.loads(raw),
                                     "content_type": self.headers.get("Content-Type")})
        return self._reply(404, {"error": "not found"})

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")


@pytest.fixture(scope="module")
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def pets(api):
    api.seen.clear()
    return {t.name: t for t in load_openapi_tools(f"{api.base}/openapi.json", allow_private=True)}


def _last(api, path_prefix: str = "/api"):
    return [r for r in api.seen if r["path"].startswith(path_prefix)][-1]


# ---- documents → tools -------------------------------------------------------------------------


def test_tools_get_names_descriptions_and_schemas(pets):
    assert set(pets) == {"petstore-listPets", "petstore-createPet", "petstore-showPetById",
                         "petstore-delete_pets_petId", "petstore-create_owner", "petstore-echoRequest",
                         "petstore-alwaysFails", "petstore-bigText", "petstore-health"}
    listing = pets["petstore-listPets"]
    assert listing.description.startswith("List pets. Returns the pets")
    props = listing.parameters["properties"]
    assert set(props) == {"limit", "tag", "X-Request-Id"}
    assert props["limit"] == {"type": "integer", "minimum": 1, "maximum": 100,
                              "description": "How many pets to return"}
    assert listing.parameters["required"] == []
    show = pets["petstore-showPetById"].parameters
    assert show["required"] == ["petId"] and show["properties"]["petId"]["type"] == "string"


def test_refs_are_resolved_with_cycles_guarded(pets):
    create = pets["petstore-createPet"].parameters   # a body-only operation: the body's properties
    assert "$ref" not in json.dumps(create)
    assert create["required"] == ["name"] and create["description"] == "The pet to add"
    assert create["properties"]["tag"]["type"] == ["string", "null"]          # 3.0 nullable
    assert create["properties"]["age"]["exclusiveMinimum"] == 0              # 3.0 boolean bound
    owner = pets["petstore-create_owner"].parameters
    assert "$ref" not in json.dumps(owner)
    assert "recursive" in owner["properties"]["manager"]["description"]
    assert "recursive" in owner["properties"]["pets"]["items"]["properties"]["owner"]["description"]


def test_yaml_document_with_base_url_and_array_queries(api):
    tools = {t.name: t for t in load_openapi_tools(str(FIXTURES / "todo.yaml"), base_url=f"{api.base}/v1",
                                                   allow_private=True, name_prefix="todo")}
    assert set(tools) == {"todo-listTodos", "todo-updateTodo"}
    out = json.loads(tools["todo-listTodos"].run({"done": False, "ids": [1, 2], "labels": ["a", "b"]}))
    assert out["query"] == {"done": ["false"], "ids": ["1,2"], "labels": ["a", "b"]}
    patched = json.loads(tools["todo-updateTodo"].run({"id": 7, "body": {"done": True}}))
    assert patched == {"id": "7", "patch": {"done": True}, "content_type": "application/merge-patch+json"}
    assert tools["todo-updateTodo"].description == "Update one todo item."
    with pytest.raises(ToolInputError):
        tools["todo-updateTodo"].run({"id": 7, "body": {"colour": "red"}})  # additionalProperties: false


def test_yaml_servers_variables_give_the_default_server():
    tools = load_openapi_tools(str(FIXTURES / "todo.yaml"))
    assert tools[0].server == "https://todo.example.invalid/v1"
    assert tools[0].name.startswith("todo_service-")


def test_manifest_is_followed_to_its_api_url(api):
    tools = load_openapi_tools(f"{api.base}/.well-known/ai-plugin.json", allow_private=True)
    names = [t.name for t in tools]
    assert "pets-listPets" in names and all(n.startswith("pets-") for n in names)
    assert tools[0].description.startswith("Plugin for listing, adding and looking up the pets")
    assert sum("Plugin for listing" in t.description for t in tools) == 1   # the manifest text once
    assert json.loads(tools[names.index("pets-showPetById")].run("1"))["name"] == "Tom"


def test_operations_filter(api):
    tools = load_openapi_tools(f"{api.base}/openapi.json", allow_private=True,
                               operations=["listPets", "GET /pets/{petId}"])
    assert [t.name for t in tools] == ["petstore-listPets", "petstore-showPetById"]
    with pytest.raises(ConfigError, match="operations not found: nope"):
        load_openapi_tools(f"{api.base}/openapi.json", allow_private=True, operations=["listPets", "nope"])


def test_dict_source_needs_an_absolute_server_or_base_url(api):
    doc = json.loads((FIXTURES / "petstore.json").read_text())
    with pytest.raises(ConfigError, match="base_url"):
        load_openapi_tools(doc)
    tools = load_openapi_tools(doc, base_url=f"{api.base}/api", allow_private=True, name_prefix="")
    assert "listPets" in [t.name for t in tools]


# ---- calls -------------------------------------------------------------------------------------


def test_get_with_path_and_query_parameters(api, pets):
    out = pets["petstore-listPets"].run('{"limit": 1, "tag": "dog", "X-Request-Id": "r-42"}')
    assert json.loads(out) == [{"id": 2, "name": "Rex", "tag": "dog"}]
    assert out.startswith("[\n  {")                       # pretty-printed JSON
    seen = _last(api)
    assert seen["path"] == "/api/pets?limit=1&tag=dog" and seen["headers"]["X-Request-Id"] == "r-42"
    assert json.loads(pets["petstore-showPetById"].run({"petId": "1"}))["name"] == "Tom"
    assert pets["petstore-health"].run("") == "ok"
    assert pets["petstore-delete_pets_petId"].run({"petId": "2"}) == "HTTP 204 (empty body)"


def test_post_with_json_body(api, pets):
    out = json.loads(pets["petstore-createPet"].run({"name": "Nemo", "tag": "fish"}))
    assert out == {"id": 3, "name": "Nemo", "tag": "fish"}
    seen = _last(api)
    assert seen["method"] == "POST" and seen["headers"]["Content-Type"] == "application/json"
    assert json.loads(seen["body"]) == {"name": "Nemo", "tag": "fish"}


def test_arguments_are_validated(pets):
    with pytest.raises(ToolInputError, match="name"):
        pets["petstore-createPet"].run({"tag": "x"})
    with pytest.raises(ToolInputError):
        pets["petstore-listPets"].run({"limit": "many"})
    with pytest.raises(ToolInputError):
        pets["petstore-listPets"].run({"limit": 1, "unknown": 2})
    with pytest.raises(ToolInputError):
        pets["petstore-showPetById"].run({})


def test_path_injection_stays_inside_one_segment(api, pets):
    with pytest.raises(ToolExecutionError, match="HTTP 404"):
        pets["petstore-showPetById"].run({"petId": "../admin?x=1"})
    assert _last(api)["path"] == "/api/pets/..%2Fadmin%3Fx%3D1"
    for bad in ("..", "."):
        with pytest.raises(ToolInputError):
            pets["petstore-showPetById"].run({"petId": bad})
    with pytest.raises(ToolExecutionError):
        pets["petstore-showPetById"].run({"petId": "1#x/../../echo"})
    assert _last(api)["path"] == "/api/pets/1%23x%2F..%2F..%2Fecho"
    assert not any(r["path"].startswith(("/admin", "/api/admin", "/api/echo")) for r in api.seen)


def test_non_2xx_becomes_an_error_observation(pets):
    with pytest.raises(ToolExecutionError) as info:
        pets["petstore-alwaysFails"].run("")
    assert "HTTP 500" in str(info.value) and "the database is on fire" in str(info.value)
    assert "GET /fail" in str(info.value)
    with pytest.raises(ToolExecutionError, match="no such pet"):
        pets["petstore-showPetById"].run("99")


def test_long_answers_keep_head_and_tail(pets):
    out = pets["petstore-bigText"].run("")
    assert len(out) < 8200 and out.startswith("AAAA") and out.endswith("THE-END")
    assert "characters omitted" in out


_BASIC = "Basic " + base64.b64encode(b"alice:pw-SECRET-0").decode()


@pytest.mark.parametrize("auth, check", [
    ({"type": "bearer", "token": "tok-SECRET-123"},
     lambda h, q: h["Authorization"] == "Bearer tok-SECRET-123"),
    ({"type": "header", "name": "X-Api-Key", "value": "key-SECRET-456"},
     lambda h, q: h["X-Api-Key"] == "key-SECRET-456"),
    ({"type": "query", "name": "api_key", "value": "q-SECRET-789"},
     lambda h, q: q["api_key"] == ["q-SECRET-789"]),
    ({"type": "basic", "username": "alice", "password": "pw-SECRET-0"},
     lambda h, q: h["Authorization"] == _BASIC),
])
def test_auth_is_sent_but_never_shown(api, auth, check):
    tools = {t.name: t for t in load_openapi_tools(f"{api.base}/openapi.json", allow_private=True, auth=auth)}
    out = tools["petstore-echoRequest"].run("")
    seen = _last(api)
    assert check(seen["headers"], parse_qs(urlsplit(seen["path"]).query))
    assert "SECRET" not in out and "***" in out                 # the server echoed it: redacted
    assert _BASIC.split()[1] not in out
    assert all("SECRET" not in t.description + json.dumps(t.parameters) for t in tools.values())


def test_secrets_stay_out_of_network_errors(api):
    tools = {t.name: t for t in load_openapi_tools(
        str(FIXTURES / "petstore.json"), base_url="http://127.0.0.1:9/api", allow_private=True, timeout=2,
        auth={"type": "query", "name": "api_key", "value": "q-SECRET-789"})}
    with pytest.raises(ToolExecutionError) as info:
        tools["petstore-health"].run("")
    assert "SECRET" not in str(info.value) and "could not reach" in str(info.value)


def test_bad_auth_config_names_the_problem_not_the_value():
    with pytest.raises(ConfigError, match="needs token"):
        load_openapi_tools(str(FIXTURES / "todo.yaml"), auth={"type": "bearer"})
    with pytest.raises(ConfigError, match="not supported") as info:
        load_openapi_tools(str(FIXTURES / "todo.yaml"), auth={"type": "oauth", "secret": "s3cr3t-value"})
    assert "s3cr3t" not in str(info.value)


# ---- safety and invalid documents ---------------------------------------------------------------


def test_private_targets_are_refused_by_default(api):
    with pytest.raises(ConfigError, match="loopback"):
        load_openapi_tools(f"{api.base}/openapi.json")
    tools = {t.name: t for t in load_openapi_tools(str(FIXTURES / "petstore.json"), base_url=f"{api.base}/api")}
    count = len(api.seen)
    with pytest.raises((ToolExecutionError, ToolInputError), match="loopback"):
        tools["petstore-health"].run("")
    assert len(api.seen) == count                                # nothing was sent


@pytest.mark.parametrize("source, message", [
    (str(FIXTURES / "swagger2.json"), "defines no operations"),
    (str(FIXTURES / "broken_ref.json"), "points to nothing"),
    (str(FIXTURES / "missing.json"), "cannot be read"),
    (str(Path(__file__)), "not valid JSON or YAML|not a JSON/YAML object|not an OpenAPI"),
    ({"openapi": "3.0.0", "info": {}, "paths": []}, "'paths' must be an object"),
    ({"info": {"title": "x"}}, "not an OpenAPI 3.x or Swagger 2.0 document"),
])
def test_invalid_documents_raise_config_error_naming_the_source(source, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_openapi_tools(source)
    label = Path(source).name if isinstance(source, str) else "<dict>"
    assert label in str(info.value)
    assert info.value.key == "openapi_plugins"


def test_unreachable_document_url_is_a_config_error(api):
    with pytest.raises(ConfigError, match="HTTP 404"):
        load_openapi_tools(f"{api.base}/nothing-here.json?token=abc", allow_private=True)
    with pytest.raises(ConfigError) as info:
        load_openapi_tools("http://127.0.0.1:9/openapi.json?token=abc", allow_private=True, timeout=2)
    assert "token=abc" not in str(info.value)


def test_engine_sees_errors_as_observations(api, pets):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        "Thought: Do I need to use a tool? Yes\nAction: petstore-alwaysFails\nAction Input: {}",
        "Thought: Do I need to use a tool? No\nAI: it failed",
    ])
    app = AppFactory().create_app(tools_list=[pets["petstore-alwaysFails"]], llm=llm, no_default=True)
    result = app.run("try it")
    assert result.output == "it failed"
    assert result.steps[0].observation.startswith("Error: HTTP 500")


# ---- dangerous operations ------------------------------------------------------------------------


def _methods_doc(base: str) -> dict:
    op = {"parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]}
    return {"openapi": "3.0.3", "info": {"title": "Pets", "version": "1"}, "servers": [{"url": base + "/api"}],
            "paths": {"/pets": {"get": {"operationId": "listPets"}, "post": {"operationId": "createPet"},
                                "head": {"operationId": "headPets"}, "options": {"operationId": "optionsPets"}},
                      "/pets/{id}": {"put": {"operationId": "putPet", **op}, "patch": {"operationId": "patchPet", **op},
                                     "delete": {"operationId": "deletePet", **op}}}}


def _danger(tools) -> dict:
    return {t.name.split("-", 1)[1]: t.dangerous for t in tools}


def test_writing_operations_are_dangerous_by_method(api):
    flags = _danger(load_openapi_tools(_methods_doc(api.base), allow_private=True))
    assert flags == {"listPets": False, "headPets": False, "optionsPets": False, "createPet": True,
                     "putPet": True, "patchPet": True, "deletePet": True}


@pytest.mark.parametrize("option, dangerous", [(False, set()), ("false", set()),
                                               (True, {"listPets", "headPets", "optionsPets", "createPet",
                                                       "putPet", "patchPet", "deletePet"}),
                                               (["listPets", "DELETE /pets/{id}"], {"listPets", "deletePet"})])
def test_dangerous_option_overrides_the_method(api, option, dangerous):
    flags = _danger(load_openapi_tools(_methods_doc(api.base), allow_private=True, dangerous=option))
    assert {name for name, flag in flags.items() if flag} == dangerous


@pytest.mark.parametrize("option, message", [(["noSuchOp"], "noSuchOp"), (42, "dangerous"),
                                             ("sometimes", "dangerous")])
def test_bad_dangerous_option_is_a_config_error(api, option, message):
    with pytest.raises(ConfigError, match=message):
        load_openapi_tools(_methods_doc(api.base), allow_private=True, dangerous=option)


def test_refused_post_is_never_sent(api):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: pets-createPet\nAction Input: {}',
        "Thought: Do I need to use a tool? No\nAI: not allowed",
    ])
    asked = []
    app = AppFactory().create_app(llm=llm, no_default=True,
                                  openapi_plugins=[{"source": _methods_doc(api.base), "allow_private": True}],
                                  approve=lambda name, tool_input: asked.append(name) or False)
    api.seen.clear()
    result = app.run("add a pet")
    assert asked == ["pets-createPet"]
    assert "did not approve" in result.steps[0].observation
    assert api.seen == []  # the server never saw the POST
