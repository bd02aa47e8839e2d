"""A tool's parameter schema compiled into one Python function that says "plainly valid" in a microsecond.

:func:`compile_checker` turns a normalised schema (see :mod:`.schema`) into a
function ``arguments -> bool``, written as Python source once per schema and
cached. ``True`` promises two things about ``arguments`` as they are:

* jsonschema (Draft 2020-12, no format checker, as :class:`.schema.ParameterSchema`
  builds it) finds no error in them, and
* the safe coercions of :meth:`.schema.ParameterSchema.coerce` would change
  nothing (every value already has its declared type, no ``null`` is dropped),
  and no unknown name is there to be refused.

``False`` promises nothing: the caller takes the full route (coercion,
jsonschema, the message for the model), which decides. The function is
therefore strict where strictness is cheap: values must be of the exact
built-in types (``str``, ``int``, ``float``, ``bool``, ``None``, ``list``,
``dict``; a subclass is left to jsonschema), ``3.0`` is not an integer here,
an enum matches only a member of the same kind, and any exception means
``False``. A schema that uses a keyword it does not implement (``not``,
``if``, ``patternProperties``, ``$id`` ...) gets no function at all (None).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Mapping

__all__ = ["compile_checker", "Checker"]

Checker = Callable[[dict], bool]

# keywords jsonschema validates that the compiled function implements
_IMPLEMENTED = {"type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
                "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                "maxLength", "pattern", "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties",
                "dependentRequired", "anyOf", "oneOf", "allOf", "$ref", "format", "$defs", "definitions"}
# keywords that change how jsonschema reads the schema (dialect, base URI, anchors) or that it validates and the
# function does not: a schema with any of them is left to jsonschema
_UNSUPPORTED = {"not", "if", "then", "else", "contains", "minContains", "maxContains", "patternProperties",
                "propertyNames", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties", "$dynamicRef",
                "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "$id", "$anchor", "$vocabulary", "$schema"}
_PY_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                          "boolean": (bool,), "null": (type(None),), "array": (list,),
                                          "object": (dict,)}
_BY_TYPE = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
            "pattern", "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "properties", "required",
            "additionalProperties", "minProperties", "maxProperties", "dependentRequired"}
_KNOWN: frozenset[type] = frozenset({str, int, float, bool, type(None), list, dict})
_NUMBER = "({t} is int or {t} is float)"
_CACHE: dict[str, Checker | None] = {}
_CACHE_SIZE = 512
_MISSING = object()


class _Unsupported(Exception):
    pass


def compile_checker(schema: Mapping[str, Any], *, refuse_unknown: bool,
                    drops_null: frozenset[str] = frozenset()) -> Checker | None:
    """The function for the root ``schema`` (an object schema), or None when the schema needs jsonschema.

    ``refuse_unknown``: a name outside ``properties`` makes it say False (the caller refuses it).
    ``drops_null``: the optional parameters whose ``null`` the coercions drop (there ``null`` says False).
    """
    try:
        key = json.dumps([schema, refuse_unknown, sorted(drops_null)], sort_keys=True)
    except (TypeError, ValueError):
        key = None
    if key is not None and key in _CACHE:
        return _CACHE[key]
    try:
        checker: Checker | None = _Compiler(schema).root(refuse_unknown, drops_null)
    except (_Unsupported, RecursionError, ValueError, TypeError, KeyError, SyntaxError, re.error):
        checker = None
    if key is not None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = checker
    return checker


class _Compiler:
    def __init__(self, root: Mapping[str, Any]):
        self.root_schema = root
        self.consts: dict[str, Any] = {"_M": _MISSING, "_unique": _unique}
        self.functions: list[list[str]] = []
        self.refs: dict[str, str] = {}
        self.inlining: list[str] = []  # the references being written out in place, innermost last
        self.counter = 0
        self._scan(root, 0, True)

    # ---- names ----------------------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        name = self._name("_c")
        self.consts[name] = value
        return name

    def literal(self, value: Any) -> str:
        """Source text for a str / int constant (a literal), or a name bound to any other value."""
        if type(value) is str or type(value) is int:
            return repr(value)
        return self.const(value)

    # ---- what the schema may hold ---------------------------------------------------------

    def _scan(self, node: Any, depth: int, root: bool) -> None:
        if depth > 64:
            raise _Unsupported
        if isinstance(node, bool):
            return
        if not isinstance(node, dict):
            raise _Unsupported
        for key, value in node.items():
            if key in _UNSUPPORTED and not (root and key == "$schema" and isinstance(value, str)):
                raise _Unsupported
            if key in ("properties", "$defs", "definitions", "dependentRequired"):
                if not isinstance(value, dict):
                    raise _Unsupported
                if key != "dependentRequired":
                    for sub in value.values():
                        self._scan(sub, depth + 1, False)
            elif key in ("items", "additionalProperties"):
                self._scan(value, depth + 1, False)
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
                if not isinstance(value, list) or not value:
                    raise _Unsupported
                for sub in value:
                    self._scan(sub, depth + 1, False)
        if root and "$schema" in node and _has_ref(node, 0):
            raise _Unsupported  # another dialect's $ref rules

    # ---- code -----------------------------------------------------------------------------

    def root(self, refuse_unknown: bool, drops_null: frozenset[str]) -> Checker:
        schema = self.root_schema
        lines = ["def check(a):", " try:"]
        body: list[str] = []
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise _Unsupported
        required = schema.get("required") or []
        rest = {k: v for k, v in schema.items() if k != "properties"}
        rest["properties"] = {}  # the properties are checked below; the rest of the root as any object node
        rest["required"] = [r for r in required if r not in props]
        if rest.get("additionalProperties") is False:
            rest.pop("additionalProperties")  # checked below, against the real properties
        elif "additionalProperties" in rest:
            rest["properties"] = {name: True for name in props}  # names the extras
        self.node(rest, "a", body, 1)
        closed = refuse_unknown or schema.get("additionalProperties") is False
        if closed:  # no name but the properties: count the ones found
            body.append(f"n = {sum(1 for name in props if name in required)}")
        for name, sub in props.items():
            var = "v"
            if name in required:
                body.append(f"{var} = a[{self.literal(name)}]")  # a KeyError: False
                self.node(sub, var, body, 1)
            else:
                inner: list[str] = ["n += 1"] if closed else []
                if name in drops_null and _may_be_null(sub):
                    inner.append(f"if {var} is None: return False")
                self.node(sub, var, inner, 1)
                body.append(f"{var} = a.get({self.literal(name)}, _M)")
                if inner:
                    body.append(f"if {var} is not _M:")
                    body += [" " + line for line in inner]
        if closed:
            body.append("if len(a) != n: return False")
        body.append("return True")
        lines += ["  " + line for line in body]
        lines += [" except Exception:", "  return False"]
        return self._build(lines)

    def _build(self, root_lines: list[str]) -> Checker:
        source = "\n".join(line for function in self.functions for line in function) + "\n" + "\n".join(root_lines)
        namespace = dict(self.consts)
        exec(compile(source, "<parameter schema checker>", "exec"), namespace)  # noqa: S102 - code written above
        check = namespace["check"]
        check.source = source  # type: ignore[attr-defined]  # for a reader who wonders what runs
        return check  # type: ignore[no-any-return]

    def function(self, schema: Any) -> str:
        """The name of a function ``v -> bool`` for ``schema`` (anyOf branches, references)."""
        name = self._name("_f")
        body: list[str] = []
        self.node(schema, "v", body, 1)
        body.append("return True")
        self.functions.append([f"def {name}(v):", *(" " + line for line in body)])
        return name

    def resolve(self, target: Any) -> Any:
        """The schema a ``$ref`` names: only ``#/$defs/NAME`` and ``#/definitions/NAME`` are read here."""
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/~%]+)", target) if isinstance(target, str) else None
        if not match:
            raise _Unsupported
        defs = self.root_schema.get(match.group(1))
        if not isinstance(defs, dict) or match.group(2) not in defs:
            raise _Unsupported
        return defs[match.group(2)]

    def ref(self, target: str) -> str:
        if target in self.refs:
            return self.refs[target]
        name = self._name("_r")
        self.refs[target] = name  # before the body: a definition may refer to itself
        body: list[str] = []
        self.node(self.resolve(target), "v", body, 1)
        body.append("return True")
        self.functions.append([f"def {name}(v):", *(" " + line for line in body)])
        return name

    def node(self, schema: Any, var: str, out: list[str], depth: int) -> None:
        """Statements that ``return False`` unless ``var`` is valid under ``schema``."""
        if schema is True:
            return
        if schema is False:
            out.append("return False")
            return
        if not isinstance(schema, dict):
            raise _Unsupported
        keys = [k for k in schema if k in _IMPLEMENTED and k not in ("format", "$defs", "definitions")]
        if not keys:
            return
        t = f"t{depth}"
        head: list[str] = []  # the type test, written last: it names ``t`` only when the checks below use it
        out, rest = head, out
        kinds = schema.get("type")
        if kinds is not None:
            names = kinds if isinstance(kinds, list) else [kinds]
            types = {py for k in names for py in _PY_TYPES[k]}
            if types == {type(None)}:
                out.append(f"if {var} is not None: return False")
            elif len(types) == 1:
                out.append(f"if {t} is not {next(iter(types)).__name__}: return False")
            else:
                out.append(f"if {t} not in {self.const(frozenset(types))}: return False")
        else:
            types = set(_KNOWN)
            # keywords that read the value by its type need a known one; enum and const admit no other
            if _BY_TYPE.intersection(schema) and "enum" not in schema and "const" not in schema:
                out.append(f"if {t} not in {self.const(_KNOWN)}: return False")
        out = []
        if "enum" in schema:
            out.append(f"if not ({self._members(schema['enum'], var, t)}): return False")
        if "const" in schema:
            out.append(f"if not ({self._members([schema['const']], var, t)}): return False")
        self._numbers(schema, var, t, types, out)
        self._strings(schema, var, t, types, out)
        self._arrays(schema, var, t, types, out, depth)
        self._objects(schema, var, t, types, out, depth)
        if "allOf" in schema:
            for sub in schema["allOf"]:
                self.node(sub, var, out, depth + 1)
        if "anyOf" in schema:
            out.append(f"if not ({' or '.join(f'{self.function(s)}({var})' for s in schema['anyOf'])}): return False")
        if "oneOf" in schema:
            branches = schema["oneOf"]
            if not _disjoint(branches):
                raise _Unsupported  # "exactly one" needs a sure "no" from the other branches
            out.append(f"if not ({' or '.join(f'{self.function(s)}({var})' for s in branches)}): return False")
        if "$ref" in schema:
            target = self.resolve(schema["$ref"])
            if schema["$ref"] in self.inlining or len(self.inlining) >= 8:  # recursive: a function calls itself
                out.append(f"if not {self.ref(schema['$ref'])}({var}): return False")
            else:
                self.inlining.append(schema["$ref"])
                self.node(target, var, out, depth + 1)
                self.inlining.pop()
        uses_t = re.compile(rf"\b{t}\b")
        if any(uses_t.search(line) for line in out):
            rest.append(f"{t} = type({var})")
            rest += head
        else:
            rest += [uses_t.sub(f"type({var})", line) for line in head]
        rest += out

    def _members(self, values: Any, var: str, t: str) -> str:
        if not isinstance(values, list):
            raise _Unsupported
        strings = frozenset(v for v in values if type(v) is str)
        numbers = frozenset(v for v in values if type(v) is int or type(v) is float and not math.isnan(v))
        flags = frozenset(v for v in values if type(v) is bool)
        tests = []
        if strings and len(strings) == len(values):
            return f"{t} is str and {var} in {self.const(strings)}"
        if strings:
            tests.append(f"{t} is str and {var} in {self.const(strings)}")
        if numbers:
            tests.append(f"{_NUMBER.format(t=t)} and {var} in {self.const(numbers)}")
        if flags:
            tests.append(f"{t} is bool and {var} in {self.const(flags)}")
        if any(v is None for v in values):
            tests.append(f"{var} is None")
        return " or ".join(f"({test})" for test in tests) or "False"

    def _numbers(self, schema: dict, var: str, t: str, types: set, out: list[str]) -> None:
        guard = "" if types <= {int, float} else f"{_NUMBER.format(t=t)} and "
        for key, op in (("minimum", "<"), ("maximum", ">"), ("exclusiveMinimum", "<="), ("exclusiveMaximum", ">=")):
            if key in schema:
                bound = schema[key]
                if type(bound) not in (int, float):
                    raise _Unsupported
                out.append(f"if {guard}{var} {op} {self.literal(bound)}: return False")
        if "multipleOf" in schema:
            step = schema["multipleOf"]
            if type(step) is int and step > 0:  # an int's remainder, as jsonschema computes it; a float: jsonschema
                out.append(f"if {guard}({t} is float or {var} % {step}): return False")
            elif type(step) is float:
                out.append(f"if {_NUMBER.format(t=t)}: return False")
            else:
                raise _Unsupported

    def _strings(self, schema: dict, var: str, t: str, types: set, out: list[str]) -> None:
        guard = "" if types == {str} else f"{t} is str and "
        if "minLength" in schema:
            out.append(f"if {guard}len({var}) < {_count(schema['minLength'])}: return False")
        if "maxLength" in schema:
            out.append(f"if {guard}len({var}) > {_count(schema['maxLength'])}: return False")
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                raise _Unsupported
            out.append(f"if {guard}{self.const(re.compile(schema['pattern']))}.search({var}) is None: return False")

    def _arrays(self, schema: dict, var: str, t: str, types: set, out: list[str], depth: int) -> None:
        if not {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"} & set(schema):
            return
        inner: list[str] = []
        if "minItems" in schema:
            inner.append(f"if len({var}) < {_count(schema['minItems'])}: return False")
        if "maxItems" in schema:
            inner.append(f"if len({var}) > {_count(schema['maxItems'])}: return False")
        if schema.get("uniqueItems") is True:
            inner.append(f"if not _unique({var}): return False")
        elif "uniqueItems" in schema and schema["uniqueItems"] is not False:
            raise _Unsupported
        prefix = schema.get("prefixItems") or []
        item = f"x{depth}"
        for index, sub in enumerate(prefix):
            body: list[str] = []
            self.node(sub, item, body, depth + 1)
            if body:
                inner.append(f"if len({var}) > {index}:")
                inner.append(f" {item} = {var}[{index}]")
                inner += [" " + line for line in body]
        if "items" in schema:
            if schema["items"] is False:
                inner.append(f"if len({var}) > {len(prefix)}: return False")
            else:
                body = []
                self.node(schema["items"], item, body, depth + 1)
                if body:
                    source = f"{var}[{len(prefix)}:]" if prefix else var
                    inner.append(f"for {item} in {source}:")
                    inner += [" " + line for line in body]
        self._guarded(inner, t, list, types, out)

    def _objects(self, schema: dict, var: str, t: str, types: set, out: list[str], depth: int) -> None:
        if not {"properties", "required", "additionalProperties", "minProperties", "maxProperties",
                "dependentRequired"} & set(schema):
            return
        inner: list[str] = []
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        if not isinstance(props, dict) or not isinstance(required, list):
            raise _Unsupported
        for name in required:
            if not isinstance(name, str):
                raise _Unsupported
            if name not in props:
                inner.append(f"if {self.literal(name)} not in {var}: return False")
        if "minProperties" in schema:
            inner.append(f"if len({var}) < {_count(schema['minProperties'])}: return False")
        if "maxProperties" in schema:
            inner.append(f"if len({var}) > {_count(schema['maxProperties'])}: return False")
        for name, needs in (schema.get("dependentRequired") or {}).items():
            if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
                raise _Unsupported
            if needs:
                inner.append(f"if {self.literal(name)} in {var} and not {self.const(frozenset(needs))} <= {var}.keys():"
                             f" return False")
        item = f"p{depth}"
        extra = schema.get("additionalProperties", True)
        count = f"n{depth}"  # closed: the names found among the properties, against len()
        if extra is False:
            inner.append(f"{count} = {sum(1 for name in props if name in required)}")
        for name, sub in props.items():
            body: list[str] = []
            self.node(sub, item, body, depth + 1)
            if name in required:
                inner.append(f"{item} = {var}[{self.literal(name)}]")
                inner += body
            elif body or extra is False:
                inner.append(f"{item} = {var}.get({self.literal(name)}, _M)")
                inner.append(f"if {item} is not _M:")
                inner += [" " + line for line in ([f"{count} += 1"] if extra is False else []) + body]
        if extra is False:
            inner.append(f"if len({var}) != {count}: return False")
        elif extra is not True:
            body = []
            self.node(extra, item, body, depth + 1)
            if body:
                key = f"k{depth}"
                inner.append(f"for {key} in {var}:")
                inner.append(f" if {key} not in {self.const(frozenset(props))}:")
                inner.append(f"  {item} = {var}[{key}]")
                inner += ["  " + line for line in body]
        self._guarded(inner, t, dict, types, out)

    @staticmethod
    def _guarded(inner: list[str], t: str, kind: type, types: set, out: list[str]) -> None:
        if not inner:
            return
        if types == {kind}:
            out += inner
        elif kind in types:
            out.append(f"if {t} is {kind.__name__}:")
            out += [" " + line for line in inner]


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _Unsupported
    return value


def _unique(values: list) -> bool:
    """Whether a list of strings and integers holds each once (anything else: False, jsonschema decides)."""
    for value in values:
        if type(value) is not str and type(value) is not int:
            return False
    return len(set(values)) == len(values)


def _kinds(schema: Any) -> set[str] | None:
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    kinds = schema["type"]
    found = set(kinds) if isinstance(kinds, list) else {kinds}
    if "number" in found:
        found.add("integer")  # 3.0 is an integer to jsonschema, 3 a number
    return found


def _may_be_null(schema: Any) -> bool:
    """False when ``schema`` surely refuses ``null`` (its type says so); True when it may take it."""
    if isinstance(schema, dict) and isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        return False
    if isinstance(schema, dict) and "const" in schema and schema["const"] is not None:
        return False
    kinds = _kinds(schema)
    return kinds is None or "null" in kinds


def _disjoint(branches: list) -> bool:
    """True when no value can match two of ``branches`` (each names its types, and they share none)."""
    seen: set[str] = set()
    for branch in branches:
        kinds = _kinds(branch)
        if kinds is None or kinds & seen:
            return False
        seen |= kinds
    return True


def _has_ref(node: Any, depth: int) -> bool:
    if depth > 64:
        return True
    if isinstance(node, dict):
        return "$ref" in node or any(_has_ref(v, depth + 1) for v in node.values())
    if isinstance(node, list):
        return any(_has_ref(v, depth + 1) for v in node)
    return False
