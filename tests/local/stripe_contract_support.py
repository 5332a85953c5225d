"""Stripe's published API as a validator: the vendored spec subset, made strict, over the SDK's version.

``saga_local/stripe_emulator/openapi/stripe_api_subset.json`` (``scripts/stripe_openapi_subset.py``)
is OpenAPI 3.0 of API version 2023-08-16; the emulator speaks the pinned SDK's (2026-10-28.endive).
:func:`contract` applies the file's ``x-sdk-newer`` (fields and parameters the SDK adds or dropped,
enum values it adds) over the spec, then turns it into JSON Schema for ``jsonschema``:

* ``nullable: true`` becomes a ``null`` alternative (OpenAPI 3.0's keyword, not JSON Schema's);
* every object schema that lists its properties is *closed* (``additionalProperties: false``): Stripe's
  spec leaves them open, so that new fields do not break old clients; the emulator is held to the
  fields Stripe documents, so that no test relies on a field Stripe does not send.

A form-encoded request is decoded as the emulator decodes it, then each string is read as the type
its parameter's schema names (``"1500"`` as an integer where the spec says integer), as Stripe reads
it, before it is validated.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from saga_local.stripe_emulator.responses import decode_form
from saga_local.template import ROOT

if TYPE_CHECKING:
    from saga_local.stripe_emulator.recording import Exchange

SPEC_PATH = ROOT / "saga_local" / "stripe_emulator" / "openapi" / "stripe_api_subset.json"
_URI = "urn:stripe-api-subset"
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def load() -> dict[str, Any]:
    """The vendored subset, as the extraction script wrote it."""
    document: dict[str, Any] = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    return document


def spec_parameters(operation: dict[str, Any]) -> dict[str, Any]:
    """An operation's parameters as an object schema: its query parameters, or its form fields."""
    body = operation.get("requestBody", {}).get("content", {}).get("application/x-www-form-urlencoded", {})
    schema = copy.deepcopy(body.get("schema", {"type": "object", "properties": {}}))
    query = [p for p in operation.get("parameters", []) if p["in"] == "query"]
    schema.setdefault("properties", {}).update({p["name"]: p["schema"] for p in query})
    required = [p["name"] for p in query if p.get("required")]
    if required:
        schema["required"] = [*schema.get("required", []), *required]
    schema["additionalProperties"] = False
    return schema


def with_sdk_version(document: dict[str, Any]) -> dict[str, Any]:
    """The spec as of the SDK's API version: ``x-sdk-newer`` applied over it (a copy)."""
    spec = copy.deepcopy(document)
    newer = spec["x-sdk-newer"]
    schemas = spec["components"]["schemas"]
    for name, changes in newer["objects"].items():
        schema = schemas[name]
        schema["properties"].update(changes["added"])
        for field in changes["removed"]:
            del schema["properties"][field]
        schema["required"] = [f for f in schema.get("required", []) if f not in changes["removed"]]
        for field, values in changes["enum_added"].items():
            schema["properties"][field]["enum"] = [*schema["properties"][field]["enum"], *values]
    for methods in spec["paths"].values():
        for operation in methods.values():
            changes = newer["operations"][operation["operationId"]]
            parameters = spec_parameters(operation)
            # A parameter newer than the spec: its name is checked, its shape is the SDK's to know.
            parameters["properties"].update({name: {} for name in changes["added"]})
            for name in changes["removed"]:
                parameters["properties"].pop(name, None)
            operation["x-parameters"] = parameters
    return spec


def strict(node: Any, *, names: bool = False) -> Any:
    """OpenAPI 3.0 schema -> JSON Schema, every object that lists its properties closed."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    if names:
        return {key: strict(value) for key, value in node.items()}
    out = {key: strict(value, names=key == "properties") for key, value in node.items() if key != "nullable"}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable") is True:
        if "type" in out and not {"anyOf", "oneOf", "allOf", "$ref"} & set(out):
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Contract:
    """Validators for the subset's objects, operations' answers and parameters, and events."""

    spec: dict[str, Any]
    registry: Registry

    def _problems(self, schema: dict[str, Any], instance: Any, where: str) -> list[str]:
        validator = Draft202012Validator(schema, registry=self.registry)
        problems = []
        for error in validator.iter_errors(instance):
            # An anyOf (a nullable or expandable field) fails as a whole: name the closest reason.
            cause = _deepest(error)
            path = "/".join(str(p) for p in cause.absolute_path) or "(top)"
            problems.append(f"{where}: {path}: {cause.message[:200]}")
        return problems

    def object_problems(self, name: str, instance: Any, where: str = "") -> list[str]:
        """What in ``instance`` the schema ``name`` (``payment_intent``, ``event``, ``error``) refuses."""
        return self._problems({"$ref": f"{_URI}#/components/schemas/{name}"}, instance, where or name)

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]] | None:
        """The spec's (path template, operation) for a request, or None if the subset has none."""
        for template, methods in self.spec["paths"].items():
            pattern = re.escape(template).replace(re.escape("{intent}"), "(?!search$)[^/]+")
            if re.fullmatch(pattern, path) and method.lower() in methods:
                return template, methods[method.lower()]
        return None

    def response_problems(self, exchange: Exchange) -> list[str]:
        """What in the answer to ``exchange`` its operation's 200 (or its error) schema refuses."""
        found = self.operation(exchange.method, exchange.path)
        if found is None or exchange.reply is None:
            return []
        template, _ = found
        code = "200" if exchange.status == 200 else "default"
        pointer = (
            f"{_URI}#/paths/{_escape(template)}/{exchange.method.lower()}/responses/{code}"
            "/content/application~1json/schema"
        )
        where = f"{exchange.method} {exchange.path} -> {exchange.status}"
        return self._problems({"$ref": pointer}, exchange.reply, where)

    def request_problems(self, exchange: Exchange) -> list[str]:
        """What in the parameters of ``exchange`` its operation refuses (decoded as Stripe decodes them)."""
        found = self.operation(exchange.method, exchange.path)
        if found is None:
            return []
        template, operation = found
        raw = exchange.body if exchange.method == "POST" else exchange.query.encode()
        schema = operation["x-parameters"]
        params = coerce(decode_form(raw), schema, self.spec)
        pointer = f"{_URI}#/paths/{_escape(template)}/{exchange.method.lower()}/x-parameters"
        return self._problems({"$ref": pointer}, params, f"{exchange.method} {exchange.path} parameters")

    def event_problems(self, event: dict[str, Any]) -> list[str]:
        """What the Event schema refuses in ``event``, and in its ``data.object`` the PaymentIntent's."""
        where = f"event {event.get('type')}"
        problems = self.object_problems("event", event, where)
        if event.get("type") not in self.spec["x-webhook-event-types"] + ["payment_intent.created"]:
            problems.append(f"{where}: not a type the saga subscribes to")
        data = event.get("data")
        if isinstance(data, dict):
            problems += self.object_problems("payment_intent", data.get("object"), f"{where} data.object")
        return problems


def _deepest(error: ValidationError) -> ValidationError:
    """Of an anyOf's failures, the one that got furthest into the instance (not "is not null")."""
    if not error.context:
        return error
    causes = [_deepest(cause) for cause in error.context]
    return max(causes, key=lambda cause: (len(cause.absolute_path), cause.validator != "type"))


def _escape(template: str) -> str:
    return template.replace("~", "~0").replace("/", "~1").replace("{", "%7B").replace("}", "%7D")


def contract(document: dict[str, Any] | None = None) -> Contract:
    """The validators for ``document`` (the vendored subset unless given)."""
    spec = with_sdk_version(document if document is not None else load())
    converted = strict(spec)
    registry: Registry = Registry().with_resource(_URI, Resource.from_contents(converted, DRAFT202012))
    return Contract(spec=spec, registry=registry)


def coerce(value: Any, schema: dict[str, Any], spec: dict[str, Any]) -> Any:
    """A decoded form value read as ``schema`` types it (strings to integers, booleans, ...)."""
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    for alternative in schema.get("anyOf", []):
        candidate = coerce(value, alternative, spec)
        if _fits(candidate, alternative, spec):
            return candidate
    kind = schema.get("type")
    if isinstance(value, str):
        if kind == "integer" and re.fullmatch(r"-?[0-9]+", value):
            return int(value)
        if kind == "number" and re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value):
            return float(value)
        if kind == "boolean" and value in ("true", "false"):
            return value == "true"
    if isinstance(value, list) and kind == "array":
        return [coerce(item, schema.get("items", {}), spec) for item in value]
    if isinstance(value, dict) and kind in ("object", None):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            key: coerce(item, properties.get(key, extra if isinstance(extra, dict) else {}), spec)
            for key, item in value.items()
        }
    return value


def _fits(value: Any, schema: dict[str, Any], spec: dict[str, Any]) -> bool:
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    kind = schema.get("type")
    if kind is not None and not (
        isinstance(value, _PYTHON_TYPES[kind])
        and not (kind in ("integer", "number") and isinstance(value, bool))
    ):
        return False
    return "enum" not in schema or value in schema["enum"]
