"""Every fixture document loads (or gives a clear ConfigError), and every tool schema is valid 2020-12."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools
from chatgpt_tool_hub.tools.plugins.openapi._fetch import parse, yaml_loader

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"
# documents (the files they pull in, and the manifests that need a web server, are not listed)
LOADS = {"petstore.json": 9, "todo.yaml": 2, "swagger2_petstore.json": 9, "split/openapi.yaml": 4,
         "broken_external.yaml": 1, "v31_types.yaml": 3, "retrieval/openapi.yaml": 2, "styles.yaml": 4,
         "swagger2_split/spec/swagger.json": 4}
REFUSED = {"swagger2.json": "defines no operations", "broken_ref.json": "points to nothing",
           "webhooks_only.yaml": "only webhooks"}


def test_the_lists_cover_every_fixture_document():
    found = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.suffix in (".json", ".yaml", ".yml")}
    pulled_in = {p for p in found if p.startswith(("split/", "swagger2_split/")) and p not in LOADS}
    manifests = {"ai-plugin.json", "retrieval/ai-plugin.json"}
    assert found - pulled_in - manifests == set(LOADS) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(LOADS))
def test_every_tool_schema_is_valid_under_the_2020_12_metaschema(name):
    tools = load_openapi_tools(str(FIXTURES / name), base_url="https://api.example.invalid")
    assert len(tools) == LOADS[name]
    for tool in tools:
        jsonschema.Draft202012Validator.check_schema(tool.parameters)
        assert tool.parameter_schema.schema is tool.parameters           # normalised once, at load
        json.dumps(tool.openai_schema(), allow_nan=False)                 # a native request can carry it
        assert "$ref" not in json.dumps(tool.parameters)
        assert tool.describe_parameters() is not None


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_documents_that_give_no_tools_say_why(name):
    with pytest.raises(ConfigError, match=REFUSED[name]) as info:
        load_openapi_tools(str(FIXTURES / name))
    assert name in str(info.value) and info.value.key == "openapi_plugins"


def test_webhooks_only_documents_are_explained():
    with pytest.raises(ConfigError) as info:
        load_openapi_tools(str(FIXTURES / "webhooks_only.yaml"))
    assert "calls the service makes" in str(info.value) and "no tools" in str(info.value)


def test_openapi_31_type_arrays_and_keywords_are_kept():
    tools = {t.name: t for t in load_openapi_tools(str(FIXTURES / "v31_types.yaml"))}
    listing = tools["events-listEvents"].parameters["properties"]
    assert listing["since"]["type"] == ["string", "null"] and listing["since"]["examples"] == ["2024-05-01T00:00:00Z"]
    assert listing["window"]["prefixItems"] == [{"type": "integer"}, {"type": "integer"}]
    create = tools["events-createEvent"].parameters                    # body-only: the Event's properties
    assert create["properties"]["kind"] == {"const": "created"} and "id" not in create["properties"]
    assert create["properties"]["score"]["exclusiveMinimum"] == 0
    assert create["properties"]["payload"]["type"] == ["object", "null"]
    batch = tools["events-createBatch"].parameters                     # an array body: one `body` array
    assert list(batch["properties"]) == ["body"] and batch["properties"]["body"]["maxItems"] == 20
    tools["events-createBatch"].parse_arguments({"body": [{"kind": "created"}]})


def test_retrieval_plugin_shape_gives_the_body_properties():
    tools = {t.name: t for t in load_openapi_tools(str(FIXTURES / "retrieval" / "openapi.yaml"),
                                                   base_url="https://retrieval.example.invalid")}
    query = tools["retrieval_plugin_api-query_query_post"]
    assert query.parameters["required"] == ["queries"]
    assert query.parameters["properties"]["queries"]["items"]["required"] == ["query"]
    assert "queries: array of object" in query.describe_parameters()
    args = query.parse_arguments('{"queries": [{"query": "q", "filter": {"source": "email"}}]}')
    assert args == {"queries": [{"query": "q", "filter": {"source": "email"}}]}


def test_yaml_uses_libyaml_when_present_and_keeps_dates_as_text():
    yaml = pytest.importorskip("yaml")
    loader = yaml_loader()
    if yaml.__with_libyaml__:
        assert issubclass(loader, yaml.CSafeLoader)
    else:
        assert issubclass(loader, yaml.SafeLoader)
    doc = parse("openapi: 3.0.0\nwhen: 2024-01-31\nat: 2024-01-31T10:00:00Z\nn: 1\n", "x")
    assert doc == {"openapi": "3.0.0", "when": "2024-01-31", "at": "2024-01-31T10:00:00Z", "n": 1}
    with pytest.raises(ConfigError, match="not valid JSON or YAML"):
        parse("a: [unclosed", "x")
    with pytest.raises(ConfigError, match="not a JSON/YAML object"):
        parse("- just\n- a list\n", "x")
    with pytest.raises(ConfigError):
        parse("a: !!python/object:os.system {}\n", "x")              # a safe loader: no Python objects
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}", "x")


def test_a_yaml_date_example_can_be_sent_natively(tmp_path):
    doc = ("openapi: 3.0.0\ninfo: {title: d, version: '1'}\nservers: [{url: 'https://d.invalid'}]\n"
           "paths:\n  /x:\n    get:\n      operationId: x\n      parameters:\n"
           "        - {name: day, in: query, schema: {type: string, format: date, example: 2024-01-31}}\n")
    (tmp_path / "d.yaml").write_text(doc)
    (tool,) = load_openapi_tools(str(tmp_path / "d.yaml"))
    assert json.loads(json.dumps(tool.openai_schema()))["function"]["parameters"]["properties"]["day"]["example"] \
        == "2024-01-31"


def test_tools_go_through_create_app():
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    app = AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, openapi_plugins=[
        str(FIXTURES / "swagger2_petstore.json"), {"source": str(FIXTURES / "split" / "openapi.yaml")},
        {"source": str(FIXTURES / "v31_types.yaml")}])
    assert len(app.tools) == 9 + 4 + 3
