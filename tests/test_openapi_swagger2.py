"""Swagger 2.0 → OpenAPI 3: the converter's output and the tools a 2.0 document gives (no network here;
calls are in test_openapi_calls.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools
from chatgpt_tool_hub.tools.plugins.openapi._swagger2 import convert

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"
PETSTORE = json.loads((FIXTURES / "swagger2_petstore.json").read_text())


@pytest.fixture(scope="module")
def converted():
    return convert(PETSTORE)


@pytest.fixture(scope="module")
def tools():
    return {t.name.split("-", 1)[1]: t for t in load_openapi_tools(str(FIXTURES / "swagger2_petstore.json"))}


def test_host_base_path_and_schemes_become_servers(converted):
    assert converted["openapi"] == "3.0.3"
    assert converted["servers"] == [{"url": "https://petstore.example.invalid/v2"},
                                    {"url": "http://petstore.example.invalid/v2"}]
    assert convert({"swagger": "2.0", "basePath": "/api/", "paths": {}})["servers"] == [{"url": "/api"}]
    assert convert({"swagger": "2.0", "host": "h.example", "paths": {}})["servers"] == [{"url": "https://h.example"}]


def test_definitions_move_to_components_and_refs_follow(converted):
    schemas = converted["components"]["schemas"]
    assert set(schemas) == {"Category", "Tag", "Pet", "User", "ApiResponse"}
    assert schemas["Pet"]["properties"]["category"] == {"$ref": "#/components/schemas/Category"}
    assert schemas["Pet"]["discriminator"] == {"propertyName": "petType"}
    assert schemas["Pet"]["properties"]["status"]["nullable"] is True          # x-nullable
    assert "#/definitions/" not in json.dumps(converted)
    assert converted["components"]["parameters"]["limit"]["schema"]["maximum"] == 50
    assert "petBody" not in converted["components"]["parameters"]              # a body is no parameter in 3.0


def test_body_parameters_become_request_bodies(converted):
    add = converted["paths"]["/pet"]["post"]
    assert "parameters" not in add
    assert add["requestBody"] == {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}},
                                  "required": True, "description": "The pet to store"}
    update = converted["paths"]["/pet"]["put"]                                  # its own consumes
    assert set(update["requestBody"]["content"]) == {"application/json", "application/xml"}
    assert update["parameters"] == [{"name": "X-Request-Id", "in": "header", "schema": {"type": "string"}}]


def test_form_data_becomes_a_form_body(converted):
    form = converted["paths"]["/pet/{petId}"]["post"]["requestBody"]
    media = form["content"]["application/x-www-form-urlencoded"]
    assert media["schema"]["required"] == ["name"] and form["required"] is True
    assert media["schema"]["properties"]["nicknames"] == {"type": "array", "items": {"type": "string"}}
    assert media["encoding"] == {"nicknames": {"style": "form", "explode": True}}
    upload = converted["paths"]["/pet/{petId}/uploadImage"]["post"]
    assert upload["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]["file"] == {
        "type": "string", "format": "binary"}
    assert upload["parameters"][0]["name"] == "petId"                           # the global parameter, inlined


@pytest.mark.parametrize("name, style, explode", [("status", "form", True), ("tags", "form", False),
                                                  ("ids", "pipeDelimited", False), ("words", "spaceDelimited", False)])
def test_collection_formats_become_styles(converted, name, style, explode):
    params = {p.get("name"): p for p in converted["paths"]["/pet/findByStatus"]["get"]["parameters"]}
    assert (params[name]["style"], params[name]["explode"]) == (style, explode)
    assert params[name]["schema"]["type"] == "array"
    assert "collectionFormat" not in json.dumps(params[name])


def test_security_definitions_become_security_schemes(converted):
    schemes = converted["components"]["securitySchemes"]
    assert schemes["api_key"] == {"type": "apiKey", "name": "api_key", "in": "header"}
    assert schemes["basic_auth"] == {"type": "http", "scheme": "basic", "description": "user and password"}
    assert schemes["petstore_auth"]["flows"] == {"implicit": {
        "authorizationUrl": "https://petstore.example.invalid/oauth/authorize",
        "scopes": {"write:pets": "modify pets", "read:pets": "read your pets"}}}
    assert converted["security"] == [{"api_key": []}]


def test_produces_become_response_media_types(converted):
    ok = converted["paths"]["/pet"]["post"]["responses"]["200"]
    assert set(ok["content"]) == {"application/json", "application/xml"}
    assert converted["paths"]["/store/inventory"]["get"]["responses"]["200"]["content"].keys() == {"application/json"}


def test_a_swagger_document_gives_tools(tools):
    assert set(tools) == {"addPet", "updatePet", "findPetsByStatus", "getPetById", "updatePetWithForm", "deletePet",
                          "uploadFile", "getInventory", "createUsersWithArrayInput"}
    add = tools["addPet"].parameters                         # body only: the Pet's own properties
    assert add["required"] == ["name", "photoUrls"] and "id" not in add["properties"]    # readOnly id left out
    assert add["properties"]["status"]["type"] == ["string", "null"]
    update = tools["updatePet"].parameters                   # a header too: the body stays under "body"
    assert set(update["properties"]) == {"X-Request-Id", "body"} and update["required"] == ["body"]
    assert tools["createUsersWithArrayInput"].parameters["properties"]["body"]["type"] == "array"
    found = tools["findPetsByStatus"].parameters
    assert found["required"] == ["status"] and found["properties"]["limit"]["default"] == 10
    assert tools["getPetById"].parameters["properties"]["petId"]["type"] == "integer"
    assert tools["getPetById"].server == "https://petstore.example.invalid/v2"
    assert tools["addPet"].dangerous and not tools["getPetById"].dangerous
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool.parameters)


def test_swagger_file_without_host_needs_base_url(tmp_path):
    doc = {"swagger": "2.0", "info": {"title": "t", "version": "1"}, "basePath": "/v1",
           "paths": {"/x": {"get": {"operationId": "x", "responses": {"200": {"description": "ok"}}}}}}
    path = tmp_path / "swagger.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="base_url"):
        load_openapi_tools(str(path))
    (tool,) = load_openapi_tools(str(path), base_url="https://api.example.invalid/v1")
    assert tool.server == "https://api.example.invalid/v1"


def test_other_versions_are_named_in_the_error():
    with pytest.raises(ConfigError, match="swagger: 1.2"):
        load_openapi_tools({"swagger": "1.2", "paths": {}})
    with pytest.raises(ConfigError, match="openapi: 4.0"):
        load_openapi_tools({"openapi": "4.0", "paths": {}})


def test_a_swagger_document_split_into_files():
    tools = {t.name.split("-", 1)[1]: t
             for t in load_openapi_tools(str(FIXTURES / "swagger2_split" / "spec" / "swagger.json"))}
    assert set(tools) == {"findPets", "addPet", "find_pet_by_id", "addOwner"}
    find = tools["findPets"]                                  # parameters.json#/tagsParam: a 2.0 parameter
    assert find.parameters["properties"]["tags"] == {"type": "array", "items": {"type": "string"},
                                                     "description": "tags to filter by"}
    assert [(p.name, p.style, p.explode) for p in find._params] == [("tags", "form", False), ("limit", "form", True)]
    add = tools["addPet"].parameters                          # NewPet.json: allOf [Pet.json, {...}], merged
    assert set(add["properties"]) == {"id", "name", "tag", "description"} and add["required"] == ["id", "name"]
    owner = tools["addOwner"].parameters                      # an `in: body` parameter in another file
    assert owner["required"] == ["name"]                      # definitions.json#/definitions/Owner
    assert owner["properties"]["pet"]["type"] == ["object", "null"]   # x-nullable, in that file too
    assert tools["addOwner"]._body.key is None and tools["addOwner"].server == "http://pets.example.invalid/api"
