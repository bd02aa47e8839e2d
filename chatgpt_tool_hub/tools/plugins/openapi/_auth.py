"""Credentials: given explicitly, or as a secret for one of the document's ``securitySchemes``.

Forms of the ``auth`` option:

* explicit: ``{"type": "bearer", "token": ...}`` (or ``{"token": ...}``),
  ``{"type": "header" | "query" | "cookie", "name": ..., "value": ...}``,
  ``{"type": "basic", "username": ..., "password": ...}``;
* a scheme of the document: ``{"scheme": "api_key", "value": ...}`` -- where
  and under which name the value goes (``apiKey`` in header, query or cookie;
  ``http`` bearer or basic; an OAuth2 / OpenID Connect access token as bearer)
  comes from ``components/securitySchemes`` (``securityDefinitions`` in 2.0);
  basic takes ``username`` + ``password`` or ``"value": "user:password"``;
* the secret alone (a string, or ``{"value": ...}``): for the scheme the
  document's ``security`` names first, or its only scheme, or (none declared)
  the plugin manifest's ``authorization_type``, else bearer;
* a list of these, all sent (an API key and an app id);
* ``None``, ``{}``, ``"none"`` or ``{"type": "none"}``: nothing.

Errors name the option and the scheme, never a secret.
"""

from __future__ import annotations

import base64
from typing import Any, Mapping

from ....errors import ConfigError
from ....redact import Redactor
from ._common import KEY, object_at

__all__ = ["Auth", "make_auth"]

_NEEDS = {"bearer": ("token",), "header": ("name", "value"), "query": ("name", "value"),
          "cookie": ("name", "value"), "basic": ("username", "password")}


def _error(text: str) -> ConfigError:
    return ConfigError(f"OpenAPI auth: {text}", key=KEY)


class Auth:
    """One or more credentials, applied to the keyword arguments of a request."""

    def __init__(self, parts: list[tuple[str, dict[str, str]]]):
        self.parts = parts
        self.kind = "+".join(kind for kind, _ in parts)
        secrets: list[str] = []
        for kind, values in parts:
            secrets += [v for k, v in values.items() if k != "name"]
            if kind == "basic":
                secrets.append(base64.b64encode(f"{values['username']}:{values['password']}".encode()).decode())
        self._redactor = Redactor(secrets)  # every spelling (percent-encoded, JSON-escaped ...)
        self.secrets = sorted(self._redactor.secrets, key=len, reverse=True)

    def apply(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        headers = dict(out.get("headers") or {})
        for kind, v in self.parts:
            if kind == "bearer":
                headers["Authorization"] = f"Bearer {v['token']}"
            elif kind == "header":
                headers[v["name"]] = v["value"]
            elif kind == "query":
                out["params"] = list(out.get("params") or []) + [(v["name"], v["value"])]
            elif kind == "cookie":
                pair = f"{v['name']}={v['value']}"
                headers["Cookie"] = f"{headers['Cookie']}; {pair}" if headers.get("Cookie") else pair
            else:
                out["auth"] = (v["username"], v["password"])
        out["headers"] = headers
        return out

    def redact(self, text: str) -> str:
        return self._redactor.redact(text)


def _explicit(config: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    kind = str(config.get("type") or ("bearer" if "token" in config else "")).lower()
    need = _NEEDS.get(kind)
    if need is None:
        raise _error(f"type {kind or '(missing)'!r} is not supported; use bearer, header, query, cookie, basic "
                     f"or none, or name one of the document's securitySchemes with \"scheme\"")
    missing = [k for k in need if config.get(k) in (None, "")]
    if missing:
        raise _error(f"type {kind!r} needs {', '.join(missing)}")
    return kind, {k: str(config[k]) for k in need}


def _schemes(doc: dict) -> dict[str, dict]:
    found = object_at(object_at(doc, "components"), "securitySchemes")
    return {str(k): v for k, v in found.items() if isinstance(v, dict)}


def _default_scheme(doc: dict, schemes: dict[str, dict]) -> str | None:
    for requirement in doc.get("security") or [] if isinstance(doc.get("security"), list) else []:
        if isinstance(requirement, dict):
            for name in requirement:
                if str(name) in schemes:
                    return str(name)
    return next(iter(schemes)) if len(schemes) == 1 else None


def _from_scheme(name: str, scheme: dict, config: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    secret = next((config[k] for k in ("value", "token", "key") if config.get(k) not in (None, "")), None)
    kind = str(scheme.get("type") or "").lower()
    http = str(scheme.get("scheme") or "").lower()
    if kind == "http" and http == "basic":
        user, password = config.get("username"), config.get("password")
        if user in (None, "") and isinstance(secret, str) and ":" in secret:
            user, password = secret.split(":", 1)
        if user in (None, "") or password in (None, ""):
            raise _error(f"scheme {name!r} is HTTP basic: give \"username\" and \"password\" "
                         f"(or \"value\": \"user:password\")")
        return "basic", {"username": str(user), "password": str(password)}
    if secret is None:
        raise _error(f"scheme {name!r} needs its secret as \"value\"")
    if kind == "apikey":
        place, key = str(scheme.get("in") or "").lower(), scheme.get("name")
        if place not in ("header", "query", "cookie") or not key:
            raise _error(f"scheme {name!r} is an apiKey without a valid 'in' and 'name' in the document; "
                         f"give auth as {{\"type\": \"header\", \"name\": ..., \"value\": ...}}")
        return place, {"name": str(key), "value": str(secret)}
    if kind == "http" and http == "bearer" or kind in ("oauth2", "openidconnect"):
        return "bearer", {"token": str(secret)}
    raise _error(f"scheme {name!r} ({kind or '?'} {http}) is not supported; supported: apiKey, http bearer, "
                 f"http basic, an OAuth2/OpenID Connect access token")


def _one(config: Any, doc: dict, manifest: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    if isinstance(config, str):
        if config.strip().lower() in ("", "none"):
            return None
        config = {"value": config}
    if not isinstance(config, Mapping):
        raise _error("must be a dict like {\"type\": \"bearer\", \"token\": ...}, "
                     "{\"scheme\": <name in the document>, \"value\": ...}, the secret alone, or a list of those")
    if not config or str(config.get("type", "")).lower() == "none":
        return None
    if config.get("type"):
        return _explicit(config)
    schemes = _schemes(doc)
    if config.get("scheme") not in (None, ""):
        name = str(config["scheme"])
        if name not in schemes:
            known = ", ".join(sorted(schemes)) or "(none)"
            raise _error(f"scheme {name!r} is not in the document's securitySchemes (it has: {known})")
        return _from_scheme(name, schemes[name], config)
    if "token" in config and "value" not in config:  # {"token": ...}: bearer, as it always was
        return _explicit(config)
    default = _default_scheme(doc, schemes)
    if default is not None:
        return _from_scheme(default, schemes[default], config)
    if schemes:
        raise _error(f"the document declares several securitySchemes ({', '.join(sorted(schemes))}); name one: "
                     f"{{\"scheme\": \"{sorted(schemes)[0]}\", \"value\": ...}}")
    declared = str(manifest.get("authorization_type") or "bearer").lower()
    if declared == "basic":
        return _from_scheme("basic", {"type": "http", "scheme": "basic"}, config)
    return _explicit({"type": "bearer", "token": config.get("value") or config.get("token")})


def make_auth(auth: Any, doc: dict, manifest: Mapping[str, Any] | None = None) -> Auth | None:
    """The :class:`Auth` of the ``auth`` option for the (OpenAPI 3) document ``doc``; ``None`` for none."""
    if auth is None:
        return None
    entries = auth if isinstance(auth, list) else [auth]
    parts = [p for p in (_one(entry, doc, manifest or {}) for entry in entries) if p is not None]
    return Auth(parts) if parts else None
