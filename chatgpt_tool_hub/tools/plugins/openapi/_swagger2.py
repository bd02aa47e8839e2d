"""Swagger / OpenAPI 2.0 documents as OpenAPI 3.0 documents.

What moves where:

* ``host`` + ``basePath`` + ``schemes`` → ``servers`` (https first; no host:
  the bare ``basePath``, resolved against the document's own URL);
* ``definitions`` → ``components/schemas``, global ``parameters`` and
  ``responses`` → ``components/...``, every ``$ref`` rewritten to match (also
  the fragment of a reference into another file);
* ``in: body`` → ``requestBody`` (one media type per ``consumes`` entry,
  ``application/json`` by default); ``in: formData`` → a form body
  (``multipart/form-data`` when ``consumes`` says so or a field is a file,
  else ``application/x-www-form-urlencoded``), one property per field;
* the other parameters: ``type`` / ``format`` / ``items`` / bounds → ``schema``,
  ``collectionFormat`` → ``style`` / ``explode`` (csv, ssv, tsv, pipes, multi);
* ``securityDefinitions`` → ``securitySchemes`` (basic → http basic, apiKey,
  oauth2 flows renamed); ``produces`` → the media types of the responses;
* schemas: ``x-nullable`` → ``nullable``, ``type: file`` → binary string,
  a ``discriminator`` name → ``{propertyName: name}``. ``x-*`` is kept.
"""

from __future__ import annotations

from typing import Any

from ._common import object_at

__all__ = ["convert", "rewrite_refs", "prepare_file", "param_schema", "collection_style"]

_REFS = (("#/definitions/", "#/components/schemas/"), ("#/parameters/", "#/components/parameters/"),
         ("#/responses/", "#/components/responses/"))
_SCHEMA_KEYS = ("type", "format", "items", "default", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
                "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "enum", "multipleOf")
_FLOWS = {"implicit": "implicit", "password": "password", "application": "clientCredentials",
          "accessCode": "authorizationCode"}
_JSON = "application/json"
_FORM = "application/x-www-form-urlencoded"
_MULTIPART = "multipart/form-data"


def _ref(ref: str) -> str:
    file, _, fragment = ref.partition("#")
    for old, new in _REFS:
        if ("#" + fragment).startswith(old):
            return file + new + fragment[len(old) - 1:]
    return ref


def rewrite_refs(node: Any) -> Any:
    """A copy of ``node`` with Swagger 2.0 references and schema spellings as OpenAPI 3.0 has them."""
    if isinstance(node, list):
        return [rewrite_refs(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = _ref(value)
        elif key == "x-nullable" and value is True:
            out["nullable"] = True
        elif key == "discriminator" and isinstance(value, str):
            out[key] = {"propertyName": value}
        else:
            out[key] = rewrite_refs(value)
    if out.get("type") == "file":
        out["type"], out["format"] = "string", "binary"
    return out


def prepare_file(doc: Any) -> Any:
    """Another file a 2.0 document refers to: references rewritten, and its ``definitions`` /
    ``parameters`` / ``responses`` also reachable where the rewritten references look (``components``)."""
    out = rewrite_refs(doc)
    if isinstance(out, dict):
        moved = {new.split("/")[2]: out[old.split("/")[1]] for old, new in _REFS
                 if isinstance(out.get(old.split("/")[1]), dict)}
        if moved:
            out["components"] = {**moved, **object_at(out, "components")}
    return out


def collection_style(fmt: Any, place: str) -> tuple[str, bool]:
    """(style, explode) for a ``collectionFormat`` of a parameter in ``place``."""
    fmt = str(fmt or "csv")
    if fmt == "multi":
        return "form", True
    if fmt in ("ssv", "tsv", "pipes"):
        return {"ssv": "spaceDelimited", "tsv": "tabDelimited", "pipes": "pipeDelimited"}[fmt], False
    return ("simple" if place in ("path", "header") else "form"), False


def _items(items: Any) -> Any:
    if not isinstance(items, dict):
        return items
    out = {k: (_items(v) if k == "items" else v) for k, v in items.items() if k != "collectionFormat"}
    return rewrite_refs(out)


def param_schema(param: dict) -> dict:
    """The JSON schema of a 2.0 parameter that is not a body (its ``type``, ``items``, bounds ...)."""
    schema = {k: (_items(param[k]) if k == "items" else param[k]) for k in _SCHEMA_KEYS if k in param}
    if param.get("x-nullable") is True:
        schema["nullable"] = True
    if schema.get("type") == "file":
        schema["type"], schema["format"] = "string", "binary"
    return schema or {"type": "string"}


def _parameter(param: dict) -> dict:
    out = {k: v for k, v in param.items() if k in ("name", "in", "description", "required", "allowEmptyValue",
                                                    "deprecated") or str(k).startswith("x-")}
    out["schema"] = param_schema(param)
    if param.get("type") == "array":
        out["style"], out["explode"] = collection_style(param.get("collectionFormat"), str(param.get("in")))
    return out


def _media(types: Any, default: str) -> list[str]:
    kinds = [str(t) for t in types] if isinstance(types, list) and types else []
    return kinds or [default]


def _resolve_param(doc: dict, param: Any) -> Any:
    """Follow ``#/parameters/...`` references inside the document (body and form parameters cannot
    stay references in OpenAPI 3); others are left for the loader."""
    seen = set()
    while isinstance(param, dict) and isinstance(param.get("$ref"), str) and param["$ref"].startswith("#/parameters/"):
        name = param["$ref"][len("#/parameters/"):].replace("~1", "/").replace("~0", "~")
        if name in seen:
            return param
        seen.add(name)
        target = (doc.get("parameters") or {}).get(name) if isinstance(doc.get("parameters"), dict) else None
        if not isinstance(target, dict):
            return param  # points to nothing: the loader names it
        param = target
    return param


def _operation(doc: dict, op: dict, shared: list, consumes: Any, produces: Any) -> dict:
    out = {k: rewrite_refs(v) for k, v in op.items()
           if k not in ("parameters", "responses", "consumes", "produces", "schemes")}
    merged: dict[tuple[str, str], Any] = {}
    refs: list[Any] = []
    for raw in list(shared) + list(op.get("parameters") or []):
        param = _resolve_param(doc, raw)
        if isinstance(param, dict) and "$ref" not in param:
            merged[(str(param.get("in")), str(param.get("name")))] = param
        else:
            refs.append(rewrite_refs(param))
    params, body, form = list(refs), None, []
    for (place, _), param in merged.items():
        if place == "body":
            body = param
        elif place == "formData":
            form.append(param)
        else:
            params.append(_parameter(param))
    if params:
        out["parameters"] = params
    inputs = _media(op.get("consumes", consumes), _JSON)
    if body is not None:
        out["requestBody"] = {"content": {m: {"schema": rewrite_refs(body.get("schema") or {})} for m in inputs},
                              "required": bool(body.get("required"))}
        if body.get("description"):
            out["requestBody"]["description"] = body["description"]
    elif form:
        props, required, encoding = {}, [], {}
        for param in form:
            name = str(param.get("name"))
            props[name] = param_schema(param)
            if param.get("description"):
                props[name]["description"] = param["description"]
            if param.get("required"):
                required.append(name)
            if param.get("type") == "array":
                style, explode = collection_style(param.get("collectionFormat"), "query")
                encoding[name] = {"style": style, "explode": explode}
        multipart = _MULTIPART in inputs or any(p.get("type") == "file" for p in form)
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        media: dict[str, Any] = {"schema": schema}
        if encoding:
            media["encoding"] = encoding
        out["requestBody"] = {"content": {_MULTIPART if multipart else _FORM: media}, "required": bool(required)}
    outputs = _media(op.get("produces", produces), _JSON)
    responses = {}
    for code, resp in (op.get("responses") or {}).items() if isinstance(op.get("responses"), dict) else ():
        if isinstance(resp, dict) and "$ref" not in resp:
            converted: dict[str, Any] = {"description": str(resp.get("description") or "")}
            if resp.get("schema") is not None:
                converted["content"] = {m: {"schema": rewrite_refs(resp["schema"])} for m in outputs}
            responses[str(code)] = converted
        else:
            responses[str(code)] = rewrite_refs(resp)
    out["responses"] = responses or {"default": {"description": ""}}
    return out


def _servers(doc: dict) -> list[dict]:
    base = "/" + str(doc.get("basePath") or "").strip("/")
    host = str(doc.get("host") or "").strip().rstrip("/")
    if not host:
        return [{"url": base}]
    schemes = [str(s).lower() for s in doc.get("schemes") or [] if str(s).lower() in ("http", "https")]
    schemes = sorted(schemes or ["https"], key=lambda s: s != "https")
    return [{"url": f"{scheme}://{host}{base.rstrip('/')}"} for scheme in schemes]


def _security_scheme(scheme: Any) -> Any:
    if not isinstance(scheme, dict):
        return scheme
    kind = scheme.get("type")
    extra = {k: v for k, v in scheme.items() if k == "description" or str(k).startswith("x-")}
    if kind == "basic":
        return {"type": "http", "scheme": "basic", **extra}
    if kind == "apiKey":
        return {"type": "apiKey", "name": scheme.get("name"), "in": scheme.get("in"), **extra}
    if kind == "oauth2":
        flow = {k: scheme[k] for k in ("authorizationUrl", "tokenUrl") if k in scheme}
        flow["scopes"] = scheme.get("scopes") or {}
        return {"type": "oauth2", "flows": {_FLOWS.get(str(scheme.get("flow")), "implicit"): flow}, **extra}
    return dict(scheme)


def convert(doc: dict) -> dict:
    """An OpenAPI 3.0.3 document with the operations, schemas and security of the 2.0 ``doc``."""
    consumes, produces = doc.get("consumes"), doc.get("produces")
    paths: dict[str, Any] = {}
    for path, item in (doc.get("paths") or {}).items() if isinstance(doc.get("paths"), dict) else ():
        if not isinstance(item, dict) or "$ref" in item:
            paths[path] = rewrite_refs(item)
            continue
        shared = [p for p in item.get("parameters") or [] if isinstance(p, (dict, str))]
        converted: dict[str, Any] = {k: rewrite_refs(v) for k, v in item.items()
                                     if str(k).startswith("x-") or k in ("summary", "description")}
        kept = [rewrite_refs(p) if "$ref" in p else _parameter(p) for p in
                (_resolve_param(doc, p) for p in shared) if isinstance(p, dict) and p.get("in") not in ("body", "formData")]
        if kept:
            converted["parameters"] = kept
        for method, op in item.items():
            if method in ("get", "put", "post", "delete", "patch", "head", "options"):
                if isinstance(op, dict) and "$ref" not in op:
                    body_like = [p for p in shared if isinstance(_resolve_param(doc, p), dict)
                                 and _resolve_param(doc, p).get("in") in ("body", "formData")]
                    converted[method] = _operation(doc, op, body_like, consumes, produces)
                else:
                    converted[method] = rewrite_refs(op)
        paths[str(path)] = converted
    components: dict[str, Any] = {}
    if isinstance(doc.get("definitions"), dict):
        components["schemas"] = rewrite_refs(doc["definitions"])
    params = {k: _parameter(v) for k, v in object_at(doc, "parameters").items()
              if isinstance(v, dict) and v.get("in") not in ("body", "formData")}
    if params:
        components["parameters"] = params
    if isinstance(doc.get("responses"), dict):
        components["responses"] = {k: {"description": str((v or {}).get("description") or ""),
                                        **({"content": {m: {"schema": rewrite_refs(v["schema"])}
                                                        for m in _media(produces, _JSON)}}
                                           if isinstance(v, dict) and v.get("schema") is not None else {})}
                                   for k, v in doc["responses"].items()}
    if isinstance(doc.get("securityDefinitions"), dict):
        components["securitySchemes"] = {k: _security_scheme(v) for k, v in doc["securityDefinitions"].items()}
    out: dict[str, Any] = {"openapi": "3.0.3", "info": doc.get("info") if isinstance(doc.get("info"), dict)
                           else {"title": "", "version": ""}, "servers": _servers(doc), "paths": paths}
    if components:
        out["components"] = components
    for key in ("security", "tags", "externalDocs"):
        if key in doc:
            out[key] = doc[key]
    out.update({k: v for k, v in doc.items() if isinstance(k, str) and k.startswith("x-")})
    return out
