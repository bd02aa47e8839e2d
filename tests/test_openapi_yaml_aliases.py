"""YAML aliases in an OpenAPI document: counted as the nodes they stand for, under a budget."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools
from chatgpt_tool_hub.tools.plugins.openapi._fetch import MAX_YAML_NODES, parse, tree_size, yaml_loader

yaml = pytest.importorskip("yaml")

HEAD = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\nservers: [{url: 'http://127.0.0.1:9'}]\n"


def _bomb(levels: int) -> str:
    """A "billion laughs" document: each level is ten aliases of the level below (10^levels strings)."""
    lines = ["x-lol:", '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    lines += ["paths:", "  /x:", "    get:", "      operationId: x", "      parameters:",
              f"        - {{name: q, in: query, schema: {{type: array, enum: *l{levels - 1}}}}}"]
    return HEAD + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_built(tmp_path):
    text = _bomb(9)                                     # 10^9 strings as a tree
    assert len(text) < 1024
    (tmp_path / "bomb.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_openapi_tools(str(tmp_path / "bomb.yaml"))
    message = str(info.value)
    assert "bomb.yaml" in message and f"more than {MAX_YAML_NODES:,} nodes" in message and "alias" in message


def test_the_budget_counts_aliases_expanded_and_each_node_once():
    node = yaml.compose("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n", Loader=yaml_loader())
    # root + 2 keys + a (1 + 3) + b (1 + 3 x 4)
    assert tree_size(node) == 1 + 2 + 4 + 1 + 12
    node = yaml.compose(_bomb(5), Loader=yaml.SafeLoader)   # the pure-Python composer gives the same nodes
    assert tree_size(node, limit=10**7) > 10**5
    with pytest.raises(Exception, match="more than 1,000 nodes"):
        tree_size(node, limit=1000)


def test_a_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match="refers to a node that contains it"):
        parse("a: &a [1, *a]\n", "loop.yaml")


def test_a_document_with_a_few_aliases_still_loads(tmp_path):
    doc = HEAD + """\
x-common:
  limit: &limit {name: limit, in: query, schema: {type: integer, maximum: 100}}
  pet: &pet
    type: object
    properties: {name: {type: string}, tag: {type: string}}
paths:
  /pets:
    get:
      operationId: listPets
      parameters: [*limit]
    post:
      operationId: createPet
      requestBody: {content: {application/json: {schema: *pet}}}
  /toys:
    get:
      operationId: listToys
      parameters:
        - <<: *limit
          description: how many toys
"""
    (tmp_path / "pets.yaml").write_text(doc)
    tools = {t.name: t for t in load_openapi_tools(str(tmp_path / "pets.yaml"))}
    assert set(tools) == {"t-listPets", "t-createPet", "t-listToys"}
    assert tools["t-listPets"].parameters["properties"]["limit"]["maximum"] == 100
    assert tools["t-listToys"].parameters["properties"]["limit"]["maximum"] == 100
    assert set(tools["t-createPet"].parameters["properties"]) == {"name", "tag"}
