"""Extract the part of Stripe's OpenAPI spec the saga and the Stripe emulator use, and what is newer.

Stripe publishes its API as OpenAPI in the public ``stripe/openapi`` repository. This script reads one
pinned version of ``openapi/spec3.yaml`` from a clone of it and writes
``saga_local/stripe_emulator/openapi/stripe_api_subset.json``: the PaymentIntent operations the saga
calls or may call (list, search, retrieve, create, confirm, cancel), the PaymentIntent, Event and
Error schemas with every schema they reference, and the webhook event types the saga subscribes to
(each checked against the spec's list of event types). The contract test
(``tests/local/test_stripe_contract.py``) validates what the emulator answers and sends against it.

Pruned, to stay small: descriptions; and every *expandable* reference (a field that holds an id, or
the object itself when the request asks ``expand[]``, which the saga never does), whose object
alternative becomes ``{"type": "object", "x-unexpanded": "<schema>"}``. Nothing else is changed.

The pin (API version 2023-08-16) is older than the API version the pinned ``stripe`` SDK speaks
(2026-10-28.endive): the spec files of later commits could not be read when the subset was made,
Stripe's example objects (``fixtures3.json``) could, and the file carries their PaymentIntent. So the
file also records, under ``x-sdk-newer``, what the SDK's own types say differs: the PaymentIntent and
Event fields it has and the spec does not (with a schema read off the SDK's annotation), the fields
it no longer has, the enum values it adds, and each operation's parameters it adds or no longer has.
The contract test applies them over the spec, and fails when the installed SDK's differences are no
longer the recorded ones (an SDK upgrade: run this script again, on a newer pin if one can be read).

Usage::

    git clone https://github.com/stripe/openapi /tmp/stripe-openapi   # or any clone holding the commit
    .venv/bin/python scripts/stripe_openapi_subset.py --repo /tmp/stripe-openapi
    .venv/bin/python scripts/stripe_openapi_subset.py --repo /tmp/stripe-openapi --check

The clone is read with ``git show``; never commit it (only the subset, which is data).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import stripe
import stripe.params
import yaml
from stripe._api_version import _ApiVersion  # where the SDK pins its API version
from stripe._request_options import RequestOptions

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "saga_local" / "stripe_emulator" / "openapi" / "stripe_api_subset.json"

#: The source: the newest ``openapi/spec3.*`` that could be read when the subset was made (commit of
#: 2023-09-12, API version 2023-08-16); later commits' spec files could not.
SOURCE_REPOSITORY = "https://github.com/stripe/openapi"
SOURCE_COMMIT = "63a674638635c68de26b9f3add13e58198f4df44"
SOURCE_FILE = "openapi/spec3.yaml"
#: Stripe's example objects, of a newer commit (2026-07-29): its PaymentIntent is vendored too, and
#: must pass the same validation as the emulator's answers (the validation's own check).
FIXTURES_COMMIT = "f0758b15a2cf53779d699452f4ab07d11076af0f"
FIXTURES_FILE = "openapi/fixtures3.json"

#: (path, method) -> the SDK's parameter type of that operation.
OPERATIONS = {
    ("/v1/payment_intents", "get"): "PaymentIntentListParams",
    ("/v1/payment_intents", "post"): "PaymentIntentCreateParams",
    ("/v1/payment_intents/search", "get"): "PaymentIntentSearchParams",
    ("/v1/payment_intents/{intent}", "get"): "PaymentIntentRetrieveParams",
    ("/v1/payment_intents/{intent}/cancel", "post"): "PaymentIntentCancelParams",
    ("/v1/payment_intents/{intent}/confirm", "post"): "PaymentIntentConfirmParams",
}
#: Schema -> the SDK's class of that object.
OBJECTS = {"payment_intent": "PaymentIntent", "event": "Event", "error": None}
#: What the saga's webhook endpoint subscribes to (docs/webhooks.md).
WEBHOOK_EVENT_TYPES = [
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.requires_action",
]
_DROPPED_KEYS = frozenset({"description", "summary", "x-expansionResources"})


def read_spec(repo: Path, commit: str, file: str) -> dict[str, Any]:
    """The spec (or fixtures) file at ``commit`` of the clone ``repo`` (a work tree or a git directory)."""
    text = subprocess.run(  # noqa: S603 - git, on the clone the user named
        ["git", "-C", str(repo), "show", f"{commit}:{file}"],  # noqa: S607 - git from PATH, as a user runs it
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    spec: dict[str, Any] = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    return spec


def _prune(node: Any, *, names: bool = False) -> Any:
    """``node`` without its documentation keys (``names``: a map of property names, kept whole)."""
    if isinstance(node, list):
        return [_prune(item) for item in node]
    if not isinstance(node, dict):
        return node
    if names:
        return {key: _prune(value) for key, value in node.items()}
    pruned = {key: value for key, value in node.items() if key not in _DROPPED_KEYS}
    alternatives = pruned.get("anyOf")
    if (
        isinstance(alternatives, list)
        and any(a.get("type") == "string" for a in alternatives)
        and any("$ref" in a for a in alternatives)
    ):
        # An expandable field: the id, or the object when expanded (which the saga never asks for).
        pruned["anyOf"] = [
            {"type": "object", "x-unexpanded": a["$ref"].rsplit("/", 1)[-1]} if "$ref" in a else a
            for a in alternatives
        ]
    return {key: _prune(value, names=key == "properties") for key, value in pruned.items()}


def _references(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                found.add(value.rsplit("/", 1)[-1])
            else:
                found |= _references(value)
    elif isinstance(node, list):
        for item in node:
            found |= _references(item)
    return found


def extract(spec: dict[str, Any]) -> dict[str, Any]:
    """The subset: the operations, the schemas they and the three objects reach, the event types."""
    paths: dict[str, dict[str, Any]] = {}
    for path, method in OPERATIONS:
        operation = spec["paths"][path][method]
        kept = {
            key: operation[key] for key in ("operationId", "parameters", "requestBody") if key in operation
        }
        kept["responses"] = {code: operation["responses"][code] for code in ("200", "default")}
        paths.setdefault(path, {})[method] = _prune(kept)
    schemas = {name: _prune(schema) for name, schema in spec["components"]["schemas"].items()}
    wanted: set[str] = set()
    pending = _references(paths) | set(OBJECTS)
    while pending:
        name = pending.pop()
        if name not in wanted:
            wanted.add(name)
            pending |= _references(schemas[name]) - wanted
    events = spec["paths"]["/v1/webhook_endpoints"]["post"]["requestBody"]["content"][
        "application/x-www-form-urlencoded"
    ]["schema"]["properties"]["enabled_events"]["items"]["enum"]
    unknown = [t for t in WEBHOOK_EVENT_TYPES if t not in events]
    if unknown:
        raise SystemExit(f"the spec has no event type {', '.join(unknown)}")
    return {
        "openapi": spec["openapi"],
        "info": {"title": spec["info"]["title"], "version": spec["info"]["version"]},
        "paths": paths,
        "components": {"schemas": {name: schemas[name] for name in sorted(wanted)}},
        "x-webhook-event-types": WEBHOOK_EVENT_TYPES,
    }


# -- what the pinned SDK says is newer ------------------------------------------------------------


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    """A JSON schema for an SDK attribute's annotation, as far as its type tells (Any otherwise)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        nullable = type(None) in args
        rest = [a for a in args if a is not type(None)]
        literal = next((a for a in rest if typing.get_origin(a) is typing.Literal), None)
        if literal is not None and all(a is str or a is literal for a in rest):
            schema: dict[str, Any] = {"type": "string"}
        elif len(rest) == 1:
            schema = _annotation_schema(rest[0])
        else:
            schema = {}
        return {**schema, "nullable": True} if nullable and schema else schema
    if origin is typing.Literal:
        return {"type": "string", "enum": list(args)}
    if origin in (list, typing.List):  # noqa: UP006 - the SDK's own spelling
        return {"type": "array", "items": _annotation_schema(args[0]) if args else {}}
    if origin in (dict, typing.Dict):  # noqa: UP006 - the SDK's own spelling
        return {"type": "object"}
    simple = {str: "string", int: "integer", bool: "boolean", float: "number"}
    if annotation in simple:
        return {"type": simple[annotation]}
    if isinstance(annotation, type):
        return {"type": "object"}
    return {}


def _literal_values(annotation: Any) -> list[str]:
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    return [v for arg in typing.get_args(annotation) for v in _literal_values(arg)]


def sdk_differences(subset: dict[str, Any]) -> dict[str, Any]:
    """What the installed ``stripe`` SDK's types say differs from the subset's spec."""
    schemas = subset["components"]["schemas"]
    objects: dict[str, Any] = {}
    for name, class_name in OBJECTS.items():
        if class_name is None:
            continue
        # The class's own annotations, as written (its forward references are left unresolved).
        hints = {k: v for k, v in getattr(stripe, class_name).__annotations__.items() if k != "OBJECT_NAME"}
        properties = schemas[name]["properties"]
        enums = {
            field: sorted(set(_literal_values(hints[field])) - set(properties[field].get("enum", [])))
            for field in sorted(set(hints) & set(properties))
            if "enum" in properties[field]
        }
        objects[name] = {
            "added": {
                field: _annotation_schema(hints[field]) for field in sorted(set(hints) - set(properties))
            },
            "removed": sorted(set(properties) - set(hints)),
            "enum_added": {field: values for field, values in enums.items() if values},
        }
    options = set(RequestOptions.__annotations__)
    operations: dict[str, Any] = {}
    for (path, method), params_name in OPERATIONS.items():
        operation = subset["paths"][path][method]
        sdk_params = set(getattr(stripe.params, params_name).__annotations__) - options
        operations[operation["operationId"]] = {
            "added": sorted(sdk_params - set(_spec_parameters(operation))),
            "removed": sorted(set(_spec_parameters(operation)) - sdk_params),
        }
    event_types = set(_literal_values(stripe.Event.__annotations__["type"]))
    return {
        "sdk": f"stripe=={stripe.VERSION}",
        "api_version": _ApiVersion.CURRENT,
        "objects": objects,
        "operations": operations,
        "webhook_event_types_missing": [t for t in subset["x-webhook-event-types"] if t not in event_types],
    }


def _spec_parameters(operation: dict[str, Any]) -> dict[str, Any]:
    """An operation's parameters as the spec lists them: query parameters, or form fields."""
    found = {p["name"]: p["schema"] for p in operation.get("parameters", []) if p["in"] == "query"}
    body = operation.get("requestBody", {}).get("content", {}).get("application/x-www-form-urlencoded", {})
    found.update(body.get("schema", {}).get("properties", {}))
    return found


def render(spec: dict[str, Any], fixtures: dict[str, Any]) -> str:
    """The vendored file's text: where it comes from, the subset, and what the SDK says is newer."""
    subset = extract(spec)
    document = {
        "x-source": {
            "repository": SOURCE_REPOSITORY,
            "commit": SOURCE_COMMIT,
            "file": SOURCE_FILE,
            "api_version": subset["info"]["version"],
            "extracted_by": "scripts/stripe_openapi_subset.py",
            "pruned": "descriptions; the object alternative of every expandable field (x-unexpanded)",
        },
        **subset,
    }
    document["x-sdk-newer"] = sdk_differences(copy.deepcopy(subset))
    example = copy.deepcopy(fixtures["resources"]["payment_intent"])
    # The example's client secret is Stripe's own sample; a repository keeps none that looks real.
    example["client_secret"] = f"{example['id']}_secret_EXAMPLE"
    document["x-fixtures"] = {
        "commit": FIXTURES_COMMIT,
        "file": FIXTURES_FILE,
        "changed": "client_secret replaced by an obviously fake one",
        "payment_intent": example,
    }
    return json.dumps(document, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of stripe/openapi")
    parser.add_argument("--commit", default=SOURCE_COMMIT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the vendored file differs")
    args = parser.parse_args(argv)
    if args.commit != SOURCE_COMMIT:
        parser.error(f"the pinned commit is {SOURCE_COMMIT}: change SOURCE_COMMIT to move the pin")
    text = render(
        read_spec(args.repo, args.commit, SOURCE_FILE), read_spec(args.repo, FIXTURES_COMMIT, FIXTURES_FILE)
    )
    if args.check:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT.relative_to(ROOT)} is {'up to date' if same else 'out of date'}")
        return 0 if same else 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    size = len(text.encode()) // 1024
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({size} KB) from {SOURCE_COMMIT[:12]}:{SOURCE_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
