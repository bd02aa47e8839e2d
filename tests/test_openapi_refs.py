"""$ref resolution: other files beside a local document, broken references, what is left out and why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"


@pytest.fixture(scope="module")
def split():
    return {t.name: t for t in load_openapi_tools(str(FIXTURES / "split" / "openapi.yaml"))}


def test_operations_defined_in_other_files_get_their_parameters(split):
    assert set(split) == {"inventory-listItems", "inventory-createItem", "inventory-getItem", "inventory-updateItem"}
    listing = split["inventory-listItems"]                     # `get: {$ref: operations/items_list.yml}`
    assert listing.description.startswith("List the items. Items, newest first.")
    props = listing.parameters["properties"]
    assert set(props) == {"limit", "tags", "updated_since"}
    assert props["limit"]["maximum"] == 100 and props["limit"]["description"] == "How many items to return"
    assert props["updated_since"]["example"] == "2024-01-31"   # a YAML date stays the string it is in JSON
    assert not listing.dangerous and split["inventory-createItem"].dangerous


def test_path_items_in_other_files_and_references_back_to_the_root(split):
    get = split["inventory-getItem"].parameters                # `/items/{itemId}: {$ref: paths/item.yaml}`
    assert get["required"] == ["itemId"] and get["properties"]["itemId"]["pattern"] == "^[a-z0-9-]+$"
    patch = split["inventory-updateItem"].parameters           # ../openapi.yaml#/components/schemas/ItemPatch
    body = patch["properties"]["body"]
    assert body["properties"]["name"]["type"] == ["string", "null"]
    assert body["properties"]["price"] == {"type": "number", "exclusiveMinimum": 0}
    assert split["inventory-updateItem"]._body.media == "application/merge-patch+json"


def test_whole_file_schemas_are_cleaned_for_requests(split):
    create = split["inventory-createItem"].parameters         # requestBody schema: {$ref: ../models/item.yml}
    props = create["properties"]
    assert "id" not in props                                   # readOnly: the server's, not the request's
    assert props["secret_code"]["writeOnly"] is True           # writeOnly: requests only, kept
    assert create["required"] == ["name", "sku"]               # `required: true` inside `sku` moved up
    assert "pattern" not in props["sku"]                       # a JavaScript-only regex (?<name>...) dropped
    assert "description" not in props["name"]                  # `description:` left empty (null) dropped
    assert props["price"]["type"] == ["number", "null"]
    assert "recursive" in props["owner"]["properties"]["manager"]["description"]   # owner.yml -> owner.yml
    assert "x-vendor-extension-property" in props              # a property name, not an extension
    assert "$ref" not in json.dumps(create)


def test_operations_with_broken_references_are_left_out_by_name(caplog):
    with caplog.at_level(logging.INFO, logger="chatgpt_tool_hub.tools.openapi"):
        tools = load_openapi_tools(str(FIXTURES / "broken_external.yaml"))
    assert [t.name for t in tools] == ["half_broken-fine"]
    assert tools[0].parameters["properties"]["limit"]["maximum"] == 100   # split/parameters.yml#/limit
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("GET /missing-file is left out" in w and "operations/nowhere.yml" in w for w in warnings)
    assert any("POST /missing-target (missingTarget) is left out" in w and "points to nothing" in w for w in warnings)
    assert any("GET /bad-in (badPlace) is left out" in w and "in: somewhere" in w for w in warnings)
    assert any("1 tools made, 3 operations left out" in r.getMessage() for r in caplog.records)


def test_a_path_item_whose_reference_points_to_nothing_is_named_in_a_warning(tmp_path, caplog):
    doc = {"openapi": "3.0.0", "info": {"title": "d", "version": "1"}, "servers": [{"url": "https://d.invalid"}],
           "paths": {"/a": {"$ref": "missing.yaml#/A"}, "/b": {"get": {"operationId": "b"}}}}
    (tmp_path / "api.json").write_text(json.dumps(doc))
    with caplog.at_level(logging.INFO, logger="chatgpt_tool_hub.tools.openapi"):
        tools = load_openapi_tools(str(tmp_path / "api.json"))
    assert [t.name for t in tools] == ["d-b"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("/a is left out" in w and "missing.yaml" in w for w in warnings), warnings


def test_nothing_left_is_an_error_that_lists_why():
    with pytest.raises(ConfigError) as info:
        load_openapi_tools(str(FIXTURES / "broken_ref.json"))
    text = str(info.value)
    assert "none of its 1 operations" in text and "GET /x (getX)" in text and "points to nothing" in text


def test_an_operation_asked_for_by_name_says_why_it_is_missing():
    with pytest.raises(ConfigError, match="missingTarget.*points to nothing"):
        load_openapi_tools(str(FIXTURES / "broken_external.yaml"), operations=["fine", "missingTarget"])


def test_a_dict_document_cannot_reach_into_files(tmp_path):
    (tmp_path / "common.yaml").write_text("Limit: {name: limit, in: query, schema: {type: integer}}\n")
    doc = {"openapi": "3.0.0", "info": {"title": "d", "version": "1"}, "servers": [{"url": "https://d.invalid"}],
           "paths": {"/a": {"get": {"operationId": "a", "parameters": [{"$ref": str(tmp_path / "common.yaml")
                                                                        + "#/Limit"}]}},
                     "/b": {"get": {"operationId": "b"}}}}
    tools = load_openapi_tools(doc)
    assert [t.name for t in tools] == ["d-b"]


def test_a_local_document_reads_files_beside_it(tmp_path):
    (tmp_path / "common.yaml").write_text("Limit: {name: limit, in: query, schema: {type: integer, maximum: 9}}\n")
    doc = {"openapi": "3.0.0", "info": {"title": "d", "version": "1"}, "servers": [{"url": "https://d.invalid"}],
           "paths": {"/a": {"get": {"operationId": "a", "parameters": [{"$ref": "common.yaml#/Limit"}]}}}}
    (tmp_path / "api.json").write_text(json.dumps(doc))
    (tool,) = load_openapi_tools(str(tmp_path / "api.json"))
    assert tool.parameters["properties"]["limit"]["maximum"] == 9


def test_reference_cycles_and_urls_leave_the_operation_out(tmp_path):
    doc = {"openapi": "3.0.0", "info": {"title": "c", "version": "1"}, "servers": [{"url": "https://c.invalid"}],
           "components": {"parameters": {"A": {"$ref": "#/components/parameters/B"},
                                         "B": {"$ref": "#/components/parameters/A"}}},
           "paths": {"/cycle": {"get": {"operationId": "cycle", "parameters": [{"$ref": "#/components/parameters/A"}]}},
                     "/url": {"get": {"operationId": "url", "parameters": [
                         {"$ref": "https://schemas.example.invalid/common.json#/Limit"}]}},
                     "/ok": {"get": {"operationId": "ok"}}}}
    (tmp_path / "api.json").write_text(json.dumps(doc))
    assert [t.name for t in load_openapi_tools(str(tmp_path / "api.json"))] == ["c-ok"]


@pytest.mark.parametrize("doc, message", [
    ({"openapi": "3.0.0", "paths": {"/x": {"get": {"parameters": "oops"}}}}, "not a list"),
    ({"openapi": "3.0.0", "paths": {"/x": {"get": {"parameters": ["oops"]}}}}, "without a valid 'name'"),
    ({"openapi": "3.0.0", "paths": {"/x": {"get": ["oops"]}}}, "not an object"),
    ({"openapi": "3.0.0", "paths": {"/x": None}}, "defines no operations|not an object|none of its"),
    ({"openapi": "3.0.0", "paths": {"/x": {"post": {"requestBody": {"required": True, "content": {
        "application/xml": {"schema": {"type": "object"}}}}}}}}, "only JSON, form and plain-text"),
    ({"openapi": "3.0.0", "info": "not an object", "servers": "nor this", "paths": {"/x": {"get": {}}}}, "base_url"),
    ({"openapi": "3.0.0", "paths": {}, "webhooks": {}}, "defines no operations"),
])
def test_malformed_documents_give_config_errors_never_tracebacks(doc, message):
    with pytest.raises(ConfigError, match=message):
        load_openapi_tools(doc, base_url=None if "servers" in doc else "https://x.invalid")


def test_junk_schemas_are_repaired_or_the_operation_is_left_out():
    doc = {"openapi": "3.0.0", "info": {"title": "j", "version": "1"}, "servers": [{"url": "https://j.invalid"}],
           "paths": {"/x": {"get": {"operationId": "junk", "parameters": [
               {"name": "a", "in": "query", "schema": {"type": "string", "minLength": -1, "format": 5}},
               {"name": "b", "in": "query", "schema": {"type": "array", "uniqueItems": "yes", "items": "string"}},
               {"name": "c", "in": "query", "schema": {"type": "number", "multipleOf": 0, "minimum": "3"}}]}}}}
    (tool,) = load_openapi_tools(doc)
    props = tool.parameters["properties"]
    assert props["a"] == {"type": "string"}
    assert props["b"] == {"type": "array", "items": {"type": "string"}}
    assert props["c"] == {"type": "number", "minimum": 3}


def test_schemas_that_would_explode_when_inlined_are_cut_to_one_depth(caplog):
    schemas = {f"T{i}": {"type": "object", "description": "x" * 40,
                         "properties": {"a": {"$ref": f"#/components/schemas/T{i + 1}"},
                                        "b": {"$ref": f"#/components/schemas/T{i + 1}"},
                                        "n": {"type": "integer"}}} for i in range(30)}
    schemas["T30"] = {"type": "string"}
    doc = {"openapi": "3.0.0", "info": {"title": "dag", "version": "1"}, "servers": [{"url": "https://d.invalid"}],
           "components": {"schemas": schemas},
           "paths": {"/x": {"post": {"operationId": "x", "requestBody": {"content": {"application/json": {
               "schema": {"$ref": "#/components/schemas/T0"}}}}}}}}   # 2**30 objects if inlined whole
    with caplog.at_level(logging.WARNING, logger="chatgpt_tool_hub.tools.openapi"):
        (tool,) = load_openapi_tools(doc)
    text = json.dumps(tool.parameters)
    assert len(text) < 60_000 and text.count('"n"') > 10
    cut = tool.parameters
    depth = 0
    while "properties" in cut.get("properties", {}).get("a", {}):
        cut, depth = cut["properties"]["a"], depth + 1
    assert cut["properties"]["a"] == {"type": "object", "description": f"(T{depth + 1}, not expanded: nested too deep)"}
    right = tool.parameters                                   # the same depth along every branch
    for _ in range(depth):
        right = right["properties"]["b"]
    assert right["properties"]["b"] == cut["properties"]["b"]
    assert any("too large to inline whole" in r.getMessage() for r in caplog.records)


def test_many_operations_left_out_are_counted_not_each_warned(caplog):
    paths = {f"/x{i}": {"get": {"operationId": f"x{i}", "parameters": [{"$ref": "#/nope"}]}} for i in range(40)}
    paths["/ok"] = {"get": {"operationId": "ok"}}
    doc = {"openapi": "3.0.0", "info": {"title": "m", "version": "1"}, "servers": [{"url": "https://m.invalid"}],
           "paths": paths}
    with caplog.at_level(logging.INFO, logger="chatgpt_tool_hub.tools.openapi"):
        assert [t.name for t in load_openapi_tools(doc)] == ["m-ok"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 26 and "15 more operations are left out" in warnings[-1]
    assert any("1 tools made, 40 operations left out" in r.getMessage() for r in caplog.records)
