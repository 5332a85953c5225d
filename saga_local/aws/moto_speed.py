"""moto's DynamoDB and response serialiser at the cost of their work, not of their re-work.

Every claim, completion and release is one conditional ``UpdateItem``; in moto 5.2.5 each one cost
~9 ms of CPU, the largest share of the local stack's time per order. The saga's update expressions
set a dozen attributes, and moto, for each request:

* parses the expression two or three times (the handler, the backend, once more for a new item).
  A syntax tree depends on the expression's text alone, so it is parsed once per text here; every
  consumer only reads it (the validator deep-copies it before rewriting anything), and the copy is
  made by pickling, which copies the same objects as ``deepcopy`` in a fifth of the time;
* runs two validators that are quadratic in the expression: at every node of the tree they list
  every clause (or action) below it, and check those for too many SET/ADD/REMOVE clauses, or for
  paths that overlap or repeat. A node's list is part of the root's, and a part of a list without
  too many clauses, overlaps or repeats has none either: when the root passes, every node does.
  So the root is checked first; only when it fails does moto's own walk run, so that the error
  raised is the one moto raises first;
* walks the tree ten times asking two type questions per node whose answers depend on the node's
  class alone: they are answered once per class per walk.

Every moto response (not only DynamoDB's) also rebuilt its service model and, for every member of
every structure, asked six alias providers which keys to try; for a plain dict the answer depends
on the member's shape and name alone, and the model is now built once per service.

``tests/local/test_moto_speed.py`` holds the equivalence: the claims store's writes, won and lost,
and a set of expressions DynamoDB refuses give the same answers and the same table with these
patches as without.
"""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

from moto.core import responses as moto_responses
from moto.core import routing as moto_routing
from moto.core import serialize
from moto.core import utils as moto_utils
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]  # moto leaves them untyped
    DepthFirstTraverser,
    Node,
    UpdateExpression,
)
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import ActionCountValidator, OverlappingPathsValidator


def _root_first(original: Any) -> Any:
    @functools.wraps(original)
    def traverse(self: Any, node: Any) -> Any:
        if not isinstance(node, UpdateExpression):
            return original(self, node)
        try:
            self.process(node)
        except Exception:  # noqa: BLE001 - moto's own walk decides which error it raises first
            return original(self, node)
        return node

    return traverse


def _traverse(self: Any, root: Any) -> Any:
    """moto's ``DepthFirstTraverser.traverse``, step for step, with its two type tests per node
    (``isinstance`` against abstract classes, and a tuple of node types rebuilt at every node)
    answered once per class for the walk."""
    types = self.nodes_to_be_processed()
    is_node: dict[type, bool] = {}
    is_processed: dict[type, bool] = {}
    pre_processing_of_child = self.pre_processing_of_child

    def visit(node: Any, child_id: int) -> Any:
        cls = type(node)
        if cls not in is_node:
            is_node[cls] = isinstance(node, Node)
            is_processed[cls] = isinstance(node, types)
        if not is_node[cls]:
            return node
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                pre_processing_of_child(node, i)
                visit(child_node, i)
        if is_processed[cls]:
            node = self.process(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    return visit(root, -1)


def _copy(value: Any) -> Any:
    if isinstance(value, Node):
        return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))  # noqa: S301 - our own tree
    return copy.deepcopy(value)


@functools.lru_cache(maxsize=64)
def _service_model(service_name: str) -> Any:
    return moto_utils.get_service_model(service_name)


#: Per (member shape, key): the keys moto's picker tries on a dict, and the shape (held, so that its
#: id is not reused while the entry lives).
_DICT_KEYS: dict[tuple[int, str], tuple[Any, tuple[str, ...]]] = {}


def _keys_once(original: Any) -> Any:
    @functools.wraps(original)
    def get_possible_keys(self: Any, context: Any) -> Any:
        if type(context.obj) is not dict or self.alias_providers is not serialize.DEFAULT_ALIAS_PROVIDERS:
            return original(self, context)
        cache_key = (id(context.shape), context.key)
        entry = _DICT_KEYS.get(cache_key)
        if entry is None or entry[0] is not context.shape:
            entry = (context.shape, tuple(original(self, context)))
            _DICT_KEYS[cache_key] = entry
        return entry[1]

    return get_possible_keys


def patches() -> list[tuple[Any, str, Any]]:
    """``(owner, attribute, value)`` for :func:`saga_local.aws.moto_adapter.patched_moto` to apply;
    none when they are applied already (the patch nested, as ``bench/throughput.py`` does)."""
    if DepthFirstTraverser.traverse is _traverse:
        return []
    return [
        (
            UpdateExpressionParser,
            "make",
            staticmethod(functools.lru_cache(maxsize=1024)(UpdateExpressionParser.make)),
        ),
        (ActionCountValidator, "traverse", _root_first(ActionCountValidator.traverse)),
        (OverlappingPathsValidator, "traverse", _root_first(OverlappingPathsValidator.traverse)),
        (DepthFirstTraverser, "traverse", _traverse),
        (validators, "deepcopy", _copy),
        (moto_responses, "get_service_model", _service_model),
        (moto_routing, "get_service_model", _service_model),
        (
            serialize.XFormedAttributePicker,
            "get_possible_keys",
            _keys_once(serialize.XFormedAttributePicker.get_possible_keys),
        ),
    ]
