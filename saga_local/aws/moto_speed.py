"""moto's DynamoDB and response serialiser at the cost of their work, not of their re-work.

Every claim, completion and release is one conditional ``UpdateItem``, and in moto 5.2.5 those were
the largest share of the local stack's time per order (bench/moto_speed.py times a claim's write
with and without these patches; docs/performance.md, "The embedded local stack", has its
figures). The saga's update expressions set a dozen attributes, and moto, for each request:

* parses the update expression two or three times (the handler, the backend, once more for a new
  item). A syntax tree depends on the expression's text alone, so it is parsed once per text here;
  every consumer only reads it (the validator deep-copies it before rewriting anything), and the
  copy is made by pickling, which copies the same objects as ``deepcopy`` for less work;
* lexes the condition expression twice (the handler and the backend each parse it). The tokens
  depend on the text alone: they are made once per text, and each parse gets fresh nodes;
* runs two validators that are quadratic in the expression: at every node of the tree they list
  every clause (or action) below it, and check those for too many SET/ADD/REMOVE clauses, or for
  paths that overlap or repeat. A node's list is part of the root's, and a part of a list without
  too many clauses, overlaps or repeats has none either: when the root passes, every node does.
  So the root is checked first; only when it fails does moto's own walk run, so that the error
  raised is the one moto raises first;
* walks the tree ten times asking of every node whether it is a node, whether to process it, and
  with which function (rebuilding the processor's map each time): the answers depend on the node's
  class alone and are given once per class per walk.

Every moto response (not only DynamoDB's) also rebuilt its service model and, for every member of
every structure, built a context and asked six alias providers which keys to try; for a plain dict
the keys depend on the member's shape and name alone, so they are listed once, and the member is
looked up in the dict directly. The model is built once per service.

``tests/local/test_moto_speed.py`` holds the equivalence: the claims store's writes, won and lost,
conditions that pass, fail or cannot be read, and update expressions DynamoDB refuses give the same
answers and the same table with these patches as without; and every member of every response
structure of the services the stack runs is picked from a dict as moto's picker picks it.
"""

from __future__ import annotations

import copy
import functools
import pickle
from collections import deque
from typing import TYPE_CHECKING, Any

from moto.core import responses as moto_responses
from moto.core import routing as moto_routing
from moto.core import serialize
from moto.core import utils as moto_utils
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]  # moto leaves them untyped
    DepthFirstTraverser,
    Node,
    UpdateExpression,
)
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import ActionCountValidator, OverlappingPathsValidator

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


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
    """moto's ``DepthFirstTraverser.traverse``, step for step, with what it asks of every node
    answered once per class for the walk: is it a node (``isinstance`` against an abstract class),
    is it one to process (against a tuple of types rebuilt at every node), and by which function
    (``process`` rebuilds the processor's map at every node and tests each type in turn). The hook
    before each child is called only when the processor has one; a child that is not a node is not
    entered (moto returns it untouched)."""
    types = self.nodes_to_be_processed()
    processing = (
        list(self._processing_map().items()) if type(self).process is DepthFirstTraverser.process else None
    )
    pre = self.pre_processing_of_child
    if type(self).pre_processing_of_child is DepthFirstTraverser.pre_processing_of_child:
        pre = None
    kinds: dict[type, Any] = {}  # None: not a node; False: a node left as it is; else its processor

    def kind_of(node: Any) -> Any:
        cls = type(node)
        if cls not in kinds:
            if not isinstance(node, Node):
                kinds[cls] = None
            elif not isinstance(node, types):
                kinds[cls] = False
            elif processing is None:
                kinds[cls] = self.process
            else:
                matches = (function for node_type, function in processing if isinstance(node, node_type))
                kinds[cls] = next(matches, _unprocessed)
        return kinds[cls]

    def visit(node: Any, child_id: int, processor: Any) -> Any:
        parent_node = node.parent
        children = node.children
        if children is not None:
            for i, child_node in enumerate(children):
                if pre is not None:
                    pre(node, i)
                kind = kind_of(child_node)
                if kind is not None:
                    visit(child_node, i, kind)
        if processor is not False:
            node = processor(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    kind = kind_of(root)
    return root if kind is None else visit(root, -1, kind)


def _unprocessed(_node: Any) -> None:
    """What moto's ``process`` returns for a node none of its types match."""


def _copy(value: Any) -> Any:
    if isinstance(value, Node):
        return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))  # noqa: S301 - our own tree
    return copy.deepcopy(value)


@functools.lru_cache(maxsize=64)
def _service_model(service_name: str) -> Any:
    return moto_utils.get_service_model(service_name)


#: Per (member shape, key): the shape (held, so that its id is not reused while the entry lives) and
#: the keys moto's picker tries on a dict, in its order.
_DICT_KEYS: dict[tuple[int, str], tuple[Any, tuple[str, ...]]] = {}


def _dict_keys(shape: Any, key: str, list_keys: Callable[[], Iterable[str]]) -> tuple[str, ...]:
    """The keys moto's picker tries for member ``key`` of a dict, listed by ``list_keys`` once."""
    entry = _DICT_KEYS.get((id(shape), key))
    if entry is None or entry[0] is not shape:
        entry = (shape, tuple(list_keys()))
        _DICT_KEYS[(id(shape), key)] = entry
    return entry[1]


def _keys_once(original: Any) -> Any:
    @functools.wraps(original)
    def get_possible_keys(self: Any, context: Any) -> Any:
        if type(context.obj) is not dict or self.alias_providers is not serialize.DEFAULT_ALIAS_PROVIDERS:
            return original(self, context)
        return _dict_keys(context.shape, context.key, lambda: original(self, context))

    return get_possible_keys


def _plain_dict_lookup(original: Any, possible_keys: Any) -> Any:
    """``ResponseSerializer.get_value`` for a plain dict read by moto's default picker: the first
    of the picker's keys the dict holds, as ``AttributePicker.__call__`` answers it, without the
    context object, the key path and the transformer loop built for every member of every structure
    (a DynamoDB item's attribute alone is ten members)."""

    @functools.wraps(original)
    def get_value(self: Any, value: Any, key: str, shape: Any) -> Any:
        picker = self._value_picker
        if (
            type(value) is not dict
            or type(picker) is not serialize.XFormedAttributePicker
            or picker.alias_providers is not serialize.DEFAULT_ALIAS_PROVIDERS
            or picker.response_transformers
        ):
            return original(self, value, key, shape)

        def list_keys() -> Any:  # the picker's context is built only when the keys are not listed yet
            return possible_keys(picker, serialize.AttributePickerContext(obj=value, key=key, shape=shape))

        for possible_key in _dict_keys(shape, key, list_keys):
            if "." in possible_key:  # moto reads a dotted key as a path: let it
                return original(self, value, key, shape)
            if possible_key in value:
                return value[possible_key]
        return None

    return get_value


#: Per condition expression: its tokens, as moto's lexer makes them (each with empty children).
_LEXED: dict[str, tuple[tuple[Any, ...], ...]] = {}
_LEXED_MAX = 1024


def _lex_once(original: Any) -> Any:
    """moto's condition lexer, run once per expression text: it reads nothing but the text (names
    and values are looked up after it), and a condition is parsed twice per request. Each call
    gets fresh nodes, with fresh ``children`` lists, as the lexer makes them."""

    @functools.wraps(original)
    def _lex_condition_expression(self: Any) -> Any:
        text = self.condition_expression
        tokens = _LEXED.get(text)
        if tokens is None:
            nodes = original(self)  # raises for an expression it cannot read: nothing is kept
            if len(_LEXED) >= _LEXED_MAX:
                _LEXED.clear()
            _LEXED[text] = tuple(node[:4] for node in nodes)
            return nodes
        node = self.Node
        return deque(node(nonterminal, kind, text_, value, []) for nonterminal, kind, text_, value in tokens)

    return _lex_condition_expression


def patches() -> list[tuple[Any, str, Any]]:
    """``(owner, attribute, value)`` for :func:`saga_local.aws.moto_adapter.patched_moto` to apply;
    none when they are applied already (the patch nested, as ``bench/throughput.py`` does)."""
    if DepthFirstTraverser.traverse is _traverse:
        return []
    possible_keys = serialize.XFormedAttributePicker.get_possible_keys
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
        (serialize.XFormedAttributePicker, "get_possible_keys", _keys_once(possible_keys)),
        (
            serialize.ResponseSerializer,
            "get_value",
            _plain_dict_lookup(serialize.ResponseSerializer.get_value, possible_keys),
        ),
        (
            ConditionExpressionParser,
            "_lex_condition_expression",
            _lex_once(ConditionExpressionParser._lex_condition_expression),
        ),
    ]
