"""One operation → the parts of its tool: the parameter schema, where each argument goes, the body.

Arguments are the operation's path, query, header and cookie parameters by
name. The request body: when the operation takes nothing else and the body is
an object with properties (JSON or a form), its properties are the tool's
parameters (the ChatGPT retrieval plugin's ``/query`` takes ``queries``);
otherwise the body is one parameter, ``body`` (``request_body`` when a
parameter is already called ``body``), of the body's own type -- an array
body stays an array. Swagger 2.0 style ``in: body`` / ``in: formData``
parameters reached through a reference are read the same way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._common import PARAM_PLACES, OperationError, log, object_at
from ._refs import Resolver
from ._style import DEFAULT_STYLE, STYLES
from ._swagger2 import collection_style, param_schema

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
TEXT = "text/plain"
_SKIPPED_HEADERS = ("accept", "content-type", "authorization")  # the spec says these are ignored
_NOT_FLAT = ("oneOf", "anyOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired",
             "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties", "$ref")


class Param(NamedTuple):
    key: str               # the argument
    name: str              # the name on the wire
    place: str             # path, query, header, cookie
    style: str
    explode: bool
    allow_reserved: bool = False
    as_json: bool = False  # a parameter with `content`: its value is sent as JSON text


class Body(NamedTuple):
    key: str | None        # the argument holding the body; None: the arguments are its properties
    media: str
    encoding: dict
    required: bool = False


class Spec(NamedTuple):
    parameters: dict
    params: list
    body: Body | None
    description: str
    servers: Any


def _media(content: Any) -> tuple[str, Any] | None:
    """(media type, media object) of the body this tool can send: JSON first, then forms, then text."""
    if not isinstance(content, dict):
        return None
    kinds = {str(m).split(";")[0].strip().lower(): (str(m).split(";")[0].strip(), spec) for m, spec in content.items()}
    order = [k for k in kinds if k == JSON] + [k for k in kinds if k.endswith("+json")] + \
        [k for k in (FORM, MULTIPART, TEXT) if k in kinds] + [k for k in kinds if k in ("*/*", "application/*")]
    if not order:
        return None
    key = order[0]
    media = JSON if key in ("*/*", "application/*") else kinds[key][0]
    return media, kinds[key][1] if isinstance(kinds[key][1], dict) else {}


def _types(schema: Any) -> set:
    kind = schema.get("type") if isinstance(schema, dict) else None
    return set(kind) if isinstance(kind, list) else ({kind} if kind else set())


def _flat(schema: Any) -> dict | None:
    """The body as one object's ``properties`` / ``required`` / ``additionalProperties``, or ``None`` when it
    is not a plain object (an array, a string, a oneOf ...). ``allOf`` of plain objects is merged."""
    if not isinstance(schema, dict) or any(k in schema for k in _NOT_FLAT):
        return None
    kinds = _types(schema) - {"null"}
    if kinds and kinds != {"object"} or not kinds and "properties" not in schema and "allOf" not in schema:
        return None
    out: dict[str, Any] = {"properties": dict(object_at(schema, "properties")),
                           "required": [r for r in schema.get("required") or [] if isinstance(r, str)]
                           if isinstance(schema.get("required"), list) else []}
    for part in schema.get("allOf") or [] if isinstance(schema.get("allOf"), list) else []:
        merged = _flat(part)
        if merged is None:
            return None
        out["properties"].update(merged["properties"])
        out["required"] += [r for r in merged["required"] if r not in out["required"]]
    for key in ("additionalProperties", "patternProperties", "description"):
        if key in schema:
            out[key] = schema[key]
    return out if out["properties"] else None


def _param_schema(resolver: Resolver, param: dict, base: str) -> tuple[Any, bool, tuple[str, bool] | None]:
    """(schema, sent as JSON, Swagger 2.0 style) of one parameter."""
    schema, as_json, v2 = param.get("schema"), False, None
    if schema is None and isinstance(param.get("content"), dict) and param["content"]:
        media = next(iter(param["content"].values()))
        schema, as_json = (media.get("schema") if isinstance(media, dict) else None), True
    elif schema is None and "type" in param:  # a Swagger 2.0 parameter reached through a reference
        schema = param_schema(param)
        if param.get("type") == "array":
            v2 = collection_style(param.get("collectionFormat"), str(param.get("in")))
    schema = resolver.schema(schema if isinstance(schema, dict) else {"type": "string"}, base)
    return (schema if isinstance(schema, dict) else {}), as_json, v2


def _style(param: dict, place: str, v2: tuple[str, bool] | None) -> tuple[str, bool]:
    style = str(param.get("style") or (v2[0] if v2 else DEFAULT_STYLE[place]))
    if style not in STYLES[place]:
        log.info("parameter %r: style %r does not apply to a %s parameter; %s is used", param.get("name"), style,
                 place, DEFAULT_STYLE[place])
        style = DEFAULT_STYLE[place]
    explode = param.get("explode")
    if not isinstance(explode, bool):
        explode = v2[1] if v2 else style == "form"
    return style, explode


def _legacy_body(body: tuple | None, form: list) -> tuple[Any, str]:
    """A requestBody made of Swagger 2.0 style ``in: body`` / ``in: formData`` parameters."""
    if body is not None:
        param, base = body
        return ({"content": {JSON: {"schema": param.get("schema") or {}}}, "required": bool(param.get("required")),
                 "description": param.get("description")}, base)
    if form:
        props = {str(p["name"]): {**param_schema(p), **({"description": p["description"]}
                                                      if p.get("description") else {})} for p, _ in form}
        required = [str(p["name"]) for p, _ in form if p.get("required")]
        media = MULTIPART if any(p.get("type") == "file" for p, _ in form) else FORM
        return {"content": {media: {"schema": {"type": "object", "properties": props, "required": required}}},
                "required": bool(required)}, form[0][1]
    return None, ""


def build_operation(resolver: Resolver, path: str, method: str, op: dict, op_base: str, item: dict,
                    item_base: str) -> Spec:
    """The :class:`Spec` of one operation; ``OperationError`` / ``RefError`` when it cannot be a tool."""
    resolver.start_operation()
    raw = []
    for owner, base in ((item, item_base), (op, op_base)):
        listed = owner.get("parameters")
        if listed is not None and not isinstance(listed, list):
            raise OperationError("its 'parameters' is not a list")
        raw += [(p, base) for p in listed or []]
    merged: dict[tuple[str, str], tuple[dict, str]] = {}
    legacy_body, legacy_form = None, []
    for entry, base in raw:
        param, pbase = resolver.deref(entry, base)
        if not isinstance(param, dict) or not isinstance(param.get("name"), (str, int)):
            raise OperationError("it has a parameter without a valid 'name'")
        place = param.get("in")
        if place == "body":
            legacy_body = (param, pbase)
        elif place == "formData":
            legacy_form.append((param, pbase))
        elif place not in PARAM_PLACES:
            raise OperationError(f"its parameter {str(param['name'])[:80]!r} has 'in: {str(place)[:20]}'; "
                                 f"only path, query, header and cookie are parameters")
        else:
            merged[(place, str(param["name"]))] = (param, pbase)  # operation-level overrides path-level
    props: dict[str, Any] = {}
    required: list[str] = []
    params: list[Param] = []
    for (place, pname), (param, pbase) in merged.items():
        if place == "header" and pname.lower() in _SKIPPED_HEADERS:
            continue
        schema, as_json, v2 = _param_schema(resolver, param, pbase)
        if isinstance(param.get("description"), str) and param["description"] and "description" not in schema:
            schema["description"] = param["description"]
        key = pname if pname not in props else f"{place}_{pname}"
        props[key] = schema
        if place == "path" or param.get("required") is True:
            required.append(key)
        style, explode = _style(param, place, v2)
        params.append(Param(key, pname, place, style, explode, param.get("allowReserved") is True, as_json))
    body = None
    parameters: dict[str, Any] = {"type": "object", "properties": props, "required": required,
                                  "additionalProperties": False}
    if op.get("requestBody") is not None:
        request_body, rbase = resolver.deref(op["requestBody"], op_base)
    else:
        request_body, rbase = _legacy_body(legacy_body, legacy_form)
    if isinstance(request_body, dict):
        chosen = _media(request_body.get("content"))
        if chosen is None:
            kinds = ", ".join(map(str, (request_body.get("content") or {}))) or "no media type"
            if request_body.get("required") is True:
                raise OperationError(f"its request body is {kinds[:120]}; only JSON, form and plain-text bodies "
                                     f"can be sent")
            log.info("%s %s: its optional %s body is left out (only JSON, form and text bodies are sent)",
                     method.upper(), path, kinds[:120])
        else:
            media, spec = chosen
            schema = resolver.schema(spec.get("schema") if isinstance(spec.get("schema"), dict) else {}, rbase)
            schema = schema if isinstance(schema, dict) else {}
            encoding = spec.get("encoding") if isinstance(spec.get("encoding"), dict) else {}
            flat = _flat(schema) if not props and media != TEXT else None
            if flat is not None:
                parameters = {"type": "object", "properties": flat["properties"], "required": flat["required"],
                              "additionalProperties": flat.get("additionalProperties", False)}
                for key in ("patternProperties", "description"):
                    if key in flat:
                        parameters[key] = flat[key]
                if isinstance(request_body.get("description"), str) and request_body["description"]:
                    parameters["description"] = request_body["description"]
                body = Body(None, media, encoding, request_body.get("required") is True)
            else:
                key = "body" if "body" not in props else "request_body"
                if isinstance(request_body.get("description"), str) and "description" not in schema:
                    schema["description"] = request_body["description"]
                props[key] = schema if media != TEXT or schema else {"type": "string"}
                if request_body.get("required") is True:
                    required.append(key)
                body = Body(key, media, encoding, request_body.get("required") is True)
    summary = str(op.get("summary") or "").strip()
    details = str(op.get("description") or "").strip()
    description = summary if not details or details == summary else (f"{summary}. {details}" if summary else details)
    if op.get("deprecated") is True:
        description = f"(Deprecated) {description}"
    servers = op.get("servers") or item.get("servers") or None
    return Spec(parameters, params, body, description, servers)
