"""``$ref`` resolution: inside the document, and into files beside a document loaded from a local file.

A reference is followed within the document that holds it (``#/components/...``),
or into another file relative to that document (``common.yaml#/Pet``,
``models/pet.yml``) -- only when that document was read from the local disk:
a document fetched from the web (or given as a dict) never makes the loader
read a local file. Schemas are inlined for the tool's parameters: a recursive
reference ends in a ``(recursive: Name)`` placeholder, properties marked
``readOnly`` are left out of requests, OpenAPI 3.0 boolean bounds become
numbers and a ``pattern`` Python cannot compile is dropped (the server still
checks it). A reference that cannot be followed raises :class:`RefError`,
which leaves the operation out.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote

from ._fetch import MAX_DOC_BYTES, read_file

ROOT = "<document>"
MAX_REF_DEPTH = 8        # nested references inlined into one schema
MAX_SCHEMA_DEPTH = 30    # nesting levels kept in one schema (normalize allows 40)
MAX_NODES = 400          # schema objects in one inlined schema (a parameter's or a body's)
MAX_FILES = 2_000        # other files one document may pull in
MAX_TOTAL_BYTES = 64 * 1024 * 1024

_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SINGLE = ("additionalProperties", "items", "not", "contains", "propertyNames", "if", "then", "else",
           "unevaluatedProperties", "unevaluatedItems", "additionalItems")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_TEXT = ("description", "title")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]+:", flags=re.I)  # a URL scheme (two letters at least: not "C:")


class RefError(Exception):
    """A ``$ref`` that cannot be followed; the message names it and says why."""


class Resolver:
    """The documents of one source and the references between them."""

    def __init__(self, doc: dict, location: str | None, *, local: bool, prepare: Any = None):
        self.local = bool(local and location)
        self.root = os.path.abspath(location) if self.local and location else ROOT
        self.docs: dict[str, Any] = {self.root: doc}
        self._prepare = prepare  # applied to every other file read (Swagger 2.0 references → 3.0)
        self._bytes = 0
        self._nodes = 0
        self._limit = MAX_REF_DEPTH
        self.cut = False  # an operation's schema was too large to inline completely

    # ---- references ---------------------------------------------------------------------------------

    def _document(self, base: str, file_part: str, ref: str) -> str:
        if not file_part:
            return base
        if _SCHEME.match(file_part) or file_part.startswith("//"):
            raise RefError(f"$ref {ref[:200]!r} points to a URL; references are followed only into files beside "
                           f"a document loaded from a local file")
        if base == ROOT or not self.local:
            raise RefError(f"$ref {ref[:200]!r} points to another file, and a document fetched from the web or "
                           f"given as a dict cannot make the loader read local files; download the document with "
                           f"its files and load it from its local path")
        path = os.path.normpath(os.path.join(os.path.dirname(base), unquote(file_part)))
        if path not in self.docs:
            if len(self.docs) > MAX_FILES:
                raise RefError(f"$ref {ref[:200]!r}: the document pulls in more than {MAX_FILES} files")
            try:
                size = os.path.getsize(path)
            except OSError:
                raise RefError(f"$ref {ref[:200]!r} points to a file that cannot be read ({file_part[:200]})") from None
            self._bytes += size
            if size > MAX_DOC_BYTES or self._bytes > MAX_TOTAL_BYTES:
                raise RefError(f"$ref {ref[:200]!r}: the files it pulls in are too large")
            try:
                loaded = read_file(path, file_part)
            except Exception as exc:  # a ConfigError naming the file
                raise RefError(f"$ref {ref[:200]!r}: {exc}") from None
            self.docs[path] = self._prepare(loaded) if self._prepare else loaded
        return path

    def lookup(self, ref: str, base: str) -> tuple[Any, str]:
        """(target, the document it is in) of ``ref`` written in the document ``base``."""
        file_part, _, fragment = ref.partition("#")
        key = self._document(base, file_part.strip(), ref)
        node: Any = self.docs[key]
        pointer = unquote(fragment)
        if pointer in ("", "/"):
            return node, key
        if not pointer.startswith("/"):
            raise RefError(f"$ref {ref[:200]!r} is not a JSON pointer (#/...)")
        for part in pointer[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise RefError(f"$ref {ref[:200]!r} points to nothing")
        return node, key

    def deref(self, obj: Any, base: str) -> tuple[Any, str]:
        """Follow a chain of ``$ref``s (path items, operations, parameters, request bodies)."""
        seen: set[tuple[str, str]] = set()
        while isinstance(obj, dict) and isinstance(obj.get("$ref"), str):
            ref = obj["$ref"]
            if (base, ref) in seen:
                raise RefError(f"$ref cycle at {ref[:200]!r}")
            seen.add((base, ref))
            obj, base = self.lookup(ref, base)
        return obj, base

    # ---- schemas ------------------------------------------------------------------------------------

    def start_operation(self) -> None:
        self.cut = False

    def schema(self, obj: Any, base: str) -> Any:
        """``obj`` with its references inlined, for a request. References nest at most ``MAX_REF_DEPTH``
        deep; when that would make more than ``MAX_NODES`` schema objects, every branch is cut one level
        shallower (the same depth everywhere), and the references past it keep only their ``type``."""
        for limit in range(MAX_REF_DEPTH, 0, -1):
            self._nodes, self._limit = 0, limit
            try:
                return self._schema(obj, base, (), 0)
            except _TooLarge:
                self.cut = True
        self._nodes, self._limit = 0, 0
        return self._schema(obj, base, (), 0)

    def _schema(self, obj: Any, base: str, stack: tuple, depth: int) -> Any:
        if isinstance(obj, (bool, str)):  # a bare type name ("string") is normalize's to read
            return obj
        if not isinstance(obj, dict):
            return {}
        self._nodes += 1
        if self._nodes > MAX_NODES and self._limit:
            raise _TooLarge
        if isinstance(obj.get("$ref"), str):
            ref = obj["$ref"]
            name = ref.rstrip("/").rsplit("/", 1)[-1] or ref
            file_part, _, fragment = ref.partition("#")
            ident = (self._document(base, file_part.strip(), ref), unquote(fragment))
            target, target_base = self.lookup(ref, base)
            if ident in stack:
                return {"description": f"(recursive: {name})"}
            if len(stack) >= self._limit or depth >= MAX_SCHEMA_DEPTH:
                self.cut = self.cut or depth >= MAX_SCHEMA_DEPTH
                kind = target.get("type") if isinstance(target, dict) else None
                short = {"description": f"({name}, not expanded: nested too deep)"}
                return {"type": kind, **short} if isinstance(kind, (str, list)) else short
            expanded = self._schema(target, target_base, stack + (ident,), depth)
            siblings = {k: v for k, v in obj.items() if k != "$ref"}
            if siblings and isinstance(expanded, dict):
                return {**expanded, **self._schema(siblings, base, stack, depth)}
            return expanded
        out: dict[str, Any] = {}
        for key, value in obj.items():
            key = str(key)
            if key in _MAPS and isinstance(value, dict):
                out[key] = {str(k): self._schema(v, base, stack, depth + 1) for k, v in value.items()}
            elif key in _SINGLE:
                out[key] = self._schema(value, base, stack, depth + 1) if not isinstance(value, list) else \
                    [self._schema(v, base, stack, depth + 1) for v in value]
            elif key in _LISTS and isinstance(value, list):
                out[key] = [self._schema(v, base, stack, depth + 1) for v in value]
            elif key in _TEXT and not isinstance(value, str):
                continue  # "description:" left empty in YAML is null: not a schema annotation
            elif key == "$ref":
                continue
            else:
                out[key] = value
        return _request_only(_fix_openapi30(out))


class _TooLarge(Exception):
    """The inlined schema passed ``MAX_NODES``: try again with references cut shallower."""


def _fix_openapi30(schema: dict) -> dict:
    """OpenAPI 3.0 boolean ``exclusiveMinimum``/``exclusiveMaximum`` → 2020-12 numbers; patterns that
    Python's ``re`` (what the validator uses) cannot compile are dropped."""
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(bound), bool):
            if schema.pop(bound) and limit in schema:
                schema[bound] = schema.pop(limit)
    if "pattern" in schema and not _compiles(schema["pattern"]):
        schema.pop("pattern")
    if isinstance(schema.get("patternProperties"), dict):
        schema["patternProperties"] = {k: v for k, v in schema["patternProperties"].items() if _compiles(k)}
    return schema


def _compiles(pattern: Any) -> bool:
    if not isinstance(pattern, str):
        return False
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _request_only(schema: dict) -> dict:
    """Properties marked ``readOnly`` (sent by the server only) are not part of a request."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return schema
    dropped = [name for name, prop in props.items() if isinstance(prop, dict) and prop.get("readOnly") is True]
    if dropped:
        schema["properties"] = {k: v for k, v in props.items() if k not in dropped}
        if isinstance(schema.get("required"), list):
            schema["required"] = [r for r in schema["required"] if r not in dropped]
    return schema
