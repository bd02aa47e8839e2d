"""Loading a large OpenAPI document: YAML parsers side by side, and the whole loader.

A ~3 MB YAML document is generated (400 schemas that reference each other,
600 operations with parameters and request bodies, long descriptions, as in
the large public API descriptions), then parsed by

* PyYAML's pure-Python ``SafeLoader`` (what chatgpt_tool_hub used before),
* PyYAML's ``CSafeLoader`` over libyaml (what it uses when PyYAML has it),
* ``json`` on the same document written as JSON (JSON documents skip YAML),

and loaded whole by ``load_openapi_tools`` (parse, references, one tool per
operation, each schema normalised and checked against the 2020-12 metaschema;
the size budget turned off, then the default budget's verdict).

    python benchmarks/openapi_load.py [target-megabytes]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

import yaml

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools
from chatgpt_tool_hub.tools.plugins.openapi._fetch import yaml_loader

TEXT = ("Returns the objects of this kind that the caller may see, newest first. Filters combine with AND; "
        "an unknown filter is an error. ") * 3


def document(schemas: int, operations: int) -> dict:
    comps = {}
    for i in range(schemas):
        props = {f"field_{j}": {"type": "string", "description": TEXT[:120], "maxLength": 200} for j in range(12)}
        props["count"] = {"type": "integer", "minimum": 0, "nullable": True}
        props["tags"] = {"type": "array", "items": {"type": "string"}, "example": ["a", "b"]}
        if i:
            props["parent"] = {"$ref": f"#/components/schemas/Thing{i // 4}"}
        comps[f"Thing{i}"] = {"type": "object", "description": TEXT, "required": ["field_0"], "properties": props}
    paths = {}
    for i in range(operations):
        thing = f"#/components/schemas/Thing{i % schemas}"
        paths[f"/things{i}/{{id}}"] = {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {"operationId": f"getThing{i}", "summary": "One thing", "description": TEXT,
                    "parameters": [{"name": "fields", "in": "query", "style": "form", "explode": False,
                                    "schema": {"type": "array", "items": {"type": "string"}}}],
                    "responses": {"200": {"description": "ok", "content": {"application/json": {
                        "schema": {"$ref": thing}}}}}},
            "put": {"operationId": f"putThing{i}", "summary": "Replace a thing", "description": TEXT,
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": thing}}}},
                    "responses": {"200": {"description": "ok"}}},
        }
    return {"openapi": "3.0.3", "info": {"title": "Generated", "version": "1"},
            "servers": [{"url": "https://generated.example.invalid/v1"}], "paths": paths,
            "components": {"schemas": comps}}


def timed(fn, runs: int = 3) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> int:
    target = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    scale = max(1, round(target / 3.0 * 320))
    doc = document(schemas=2 * scale, operations=3 * scale // 2)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    folder = tempfile.mkdtemp()
    yaml_path, json_path = os.path.join(folder, "big.yaml"), os.path.join(folder, "big.json")
    with open(yaml_path, "w", encoding="utf-8") as fh:
        yaml.dump(doc, fh, Dumper=dumper, sort_keys=False)
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    text = open(yaml_path, encoding="utf-8").read()
    json_text = open(json_path, encoding="utf-8").read()
    print(f"document: {len(text) / 1e6:.1f} MB of YAML ({len(json_text) / 1e6:.1f} MB as JSON), "
          f"{len(doc['paths']) * 2} operations, {len(doc['components']['schemas'])} schemas; "
          f"libyaml: {'yes' if yaml.__with_libyaml__ else 'no'}")
    rows = [("PyYAML SafeLoader (pure Python)", lambda: yaml.load(text, Loader=yaml.SafeLoader), 1)]
    if yaml.__with_libyaml__:
        rows.append(("PyYAML CSafeLoader (libyaml), as loaded here", lambda: yaml.load(text, Loader=yaml_loader()), 3))
    rows.append(("json.loads of the same document", lambda: json.loads(json_text), 3))
    rows.append(("load_openapi_tools, YAML file (no size budget)",
                 lambda: load_openapi_tools(yaml_path, max_tools=0, max_schema_bytes=0), 1))
    rows.append(("load_openapi_tools, JSON file (no size budget)",
                 lambda: load_openapi_tools(json_path, max_tools=0, max_schema_bytes=0), 1))
    width = max(len(name) for name, _, _ in rows)
    for name, fn, runs in rows:
        print(f"  {name:<{width}}  {timed(fn, runs):7.3f} s")
    tools = load_openapi_tools(json_path, max_tools=0, max_schema_bytes=0)
    total = sum(len(json.dumps(t.openai_schema())) for t in tools)
    print(f"tool definitions as sent natively: {len(tools)} tools, {total / 1e6:.1f} MB")
    try:
        load_openapi_tools(json_path)
        print("with the default budget: loaded")
    except ConfigError as exc:
        print(f"with the default budget: ConfigError: {str(exc)[:240]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
