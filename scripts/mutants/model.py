"""What a mutant is, and how it is applied to a copy of the tree.

A mutant is one deliberate bug in code that decides money: an exact snippet of a Python file replaced
by another (``text``), or a transform of the state machine definition read as JSON (``asl``). Each
names the tests that should notice it. Applying a mutant never guesses: a snippet that is not in the
file exactly once, or an ASL transform whose target is missing, is an error of the catalogue (the
code moved on; the mutant must be rewritten), never a silent skip.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The state machine definition every ``asl`` mutant transforms.
ASL_PATH = "statemachine/payment_saga.asl.json"

JsonTransform = Callable[[dict[str, Any]], None]


class MutantError(Exception):
    """The mutant cannot be applied as written (snippet not found, or found more than once...)."""


@dataclass(frozen=True)
class TextEdit:
    """Replace the one occurrence of ``old`` with ``new``."""

    old: str
    new: str

    def apply(self, text: str) -> str:
        found = text.count(self.old)
        if found != 1:
            where = "not found" if found == 0 else f"found {found} times (make it unique)"
            raise MutantError(f"snippet {where}: {self.old!r}")
        if self.old == self.new:
            raise MutantError("the replacement is the snippet itself")
        return text.replace(self.old, self.new)


@dataclass(frozen=True)
class JsonEdit:
    """Transform the parsed document; the transform raises :class:`MutantError` if its target is gone."""

    transform: JsonTransform

    def apply(self, text: str) -> str:
        document = json.loads(text)
        self.transform(document)
        mutated = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        if json.loads(mutated) == json.loads(text):
            raise MutantError("the transform changed nothing")
        return mutated


@dataclass(frozen=True)
class YamlEdit:
    """Transform the template read as data (CloudFormation tags in their long form, ``Fn::GetAtt``),
    written back as YAML in that long form, which CloudFormation and the local stack read alike."""

    transform: JsonTransform

    def apply(self, text: str) -> str:
        import yaml

        from saga_local.template import parse_template

        document = parse_template(text)
        original = json.dumps(document, sort_keys=True)
        self.transform(document)
        if json.dumps(document, sort_keys=True) == original:
            raise MutantError("the transform changed nothing")
        return str(yaml.safe_dump(document, sort_keys=False, width=200))


@dataclass(frozen=True)
class Mutant:
    """One deliberate bug, the tests meant to kill it, and (rarely) why no test can.

    ``equivalent`` is the reason the mutant cannot change any outcome anyone can observe; such a
    mutant is still run, and the run fails if it is killed after all (the reason was wrong).
    """

    id: str
    path: str
    description: str
    tests: tuple[str, ...]
    edit: TextEdit | JsonEdit | YamlEdit
    equivalent: str = ""

    def mutate(self, original: str) -> str:
        mutated = self.edit.apply(original)
        if self.path.endswith(".py"):
            try:
                compile(mutated, self.path, "exec")
            except SyntaxError as exc:
                raise MutantError(f"the mutated file does not compile: {exc}") from None
        return mutated


@dataclass
class Catalogue:
    """Mutants of one file, built with :meth:`text` / :meth:`asl` so each entry reads in one place."""

    path: str
    default_tests: tuple[str, ...]
    mutants: list[Mutant] = field(default_factory=list)

    def text(
        self,
        id: str,
        old: str,
        new: str,
        description: str,
        *,
        tests: tuple[str, ...] = (),
        equivalent: str = "",
    ) -> None:
        self.mutants.append(
            Mutant(id, self.path, description, tests or self.default_tests, TextEdit(old, new), equivalent)
        )

    def yaml(
        self,
        id: str,
        transform: JsonTransform,
        description: str,
        *,
        tests: tuple[str, ...] = (),
        equivalent: str = "",
    ) -> None:
        self.mutants.append(
            Mutant(id, self.path, description, tests or self.default_tests, YamlEdit(transform), equivalent)
        )

    def asl(
        self,
        id: str,
        transform: JsonTransform,
        description: str,
        *,
        tests: tuple[str, ...] = (),
        equivalent: str = "",
    ) -> None:
        self.mutants.append(
            Mutant(id, self.path, description, tests or self.default_tests, JsonEdit(transform), equivalent)
        )


# -- ASL transforms --------------------------------------------------------------------------------


def _state(document: dict[str, Any], name: str) -> dict[str, Any]:
    try:
        state: dict[str, Any] = document["States"][name]
    except KeyError:
        raise MutantError(f"no state {name!r}") from None
    return state


def _rule(document: dict[str, Any], state: str, field_name: str, error: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = _state(document, state).get(field_name, [])
    for rule in rules:
        if error in rule["ErrorEquals"]:
            return rule
    raise MutantError(f"{state}: no {field_name} rule matching {error!r}")


def drop_rule(state: str, field_name: str, error: str) -> JsonTransform:
    """Remove the whole Retry or Catch rule whose ErrorEquals names ``error``."""

    def transform(document: dict[str, Any]) -> None:
        rule = _rule(document, state, field_name, error)
        _state(document, state)[field_name].remove(rule)

    return transform


def drop_error(state: str, field_name: str, error: str) -> JsonTransform:
    """Remove ``error`` from the ErrorEquals of the rule naming it (the rule stays for the others)."""

    def transform(document: dict[str, Any]) -> None:
        rule = _rule(document, state, field_name, error)
        if len(rule["ErrorEquals"]) < 2:
            raise MutantError(f"{state}: {error!r} is alone in its rule; use drop_rule")
        rule["ErrorEquals"].remove(error)

    return transform


def set_rule(state: str, field_name: str, error: str, **values: Any) -> JsonTransform:
    """Set fields (``MaxAttempts``, ``Next``...) of the Retry or Catch rule naming ``error``."""

    def transform(document: dict[str, Any]) -> None:
        rule = _rule(document, state, field_name, error)
        for key, value in values.items():
            if key not in rule and key != "Next":
                raise MutantError(f"{state}: the {field_name} rule for {error!r} has no {key}")
            rule[key] = value

    return transform


def _parent(document: dict[str, Any], path: tuple[str | int, ...]) -> Any:
    """The container holding ``path[-1]``; keys are dict keys, ints are list indexes."""
    if not path:
        raise MutantError("empty path")
    node: Any = document
    for depth, key in enumerate(path):
        holds = (
            isinstance(node, dict) and key in node
            if isinstance(key, str)
            else isinstance(node, list) and -len(node) <= key < len(node)
        )
        if not holds:
            raise MutantError(f"no {'/'.join(map(str, path))}")
        if depth == len(path) - 1:
            break
        node = node[key]
    return node


def set_path(path: tuple[str | int, ...], value: Any) -> JsonTransform:
    """Set the value at ``path`` (from the document's root), which must exist."""

    def transform(document: dict[str, Any]) -> None:
        _parent(document, path)[path[-1]] = value

    return transform


def drop_path(path: tuple[str | int, ...]) -> JsonTransform:
    """Delete the value at ``path``, which must exist."""

    def transform(document: dict[str, Any]) -> None:
        del _parent(document, path)[path[-1]]

    return transform
