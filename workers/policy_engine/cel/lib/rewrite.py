"""Rewrites of calls on the syntax tree, for the few Kubernetes forms the runtime parses but
cannot run as written (a library declares them; the adapter applies them before compiling).

Each rewrite replaces one call by an expression that gives the same value and the same
errors (the library that declares it says why). They work on the expression's syntax tree
(workers/policy_engine/cel/syntax/), so text in a string literal or a comment is never read, a
macro variable is told from an input of the same name, and a call's receiver and
arguments are the parser's, whatever the author's layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from workers.policy_engine.cel.syntax.nodes import (
    Call,
    Ident,
    Index,
    ListExpr,
    Literal,
    Node,
    Select,
    transform,
)
from workers.policy_engine.cel.syntax.reads import scoped


@dataclass(frozen=True)
class CallRewrite:
    """A call to be rewritten: ``member`` (``x.name(...)``) or global (``name(...)``, the
    name possibly namespaced, as ``format.named``); ``arities``: the argument counts it
    applies to (empty: any). ``rewrite`` gives the call's replacement."""

    name: str
    member: bool
    rewrite: Callable[[Call], Node]
    arities: tuple[int, ...] = ()
    introduces: str = ""  # the adapter's function the rewrite calls (errors name ``name``)

    def applies(self, call: Call, bound: Collection[int]) -> bool:
        """Whether ``call`` is this one (``bound``: the ``id()`` of the identifiers a macro
        binds, which name no namespace)."""
        if self.arities and len(call.args) not in self.arities:
            return False
        namespace, _, name = self.name.rpartition(".")
        if call.function != name:
            return False
        if self.member:
            return call.target is not None
        if not namespace:
            return call.target is None
        target = call.target
        return isinstance(target, Ident) and target.name == namespace and id(target) not in bound


def bound_identifiers(root: Node) -> frozenset[int]:
    """The ``id()`` of each identifier that names a macro variable where it stands."""
    return frozenset(
        id(node) for node, bound in scoped(root) if isinstance(node, Ident) and node.name in bound
    )


def rewrite_calls(root: Node, rewrites: Sequence[CallRewrite]) -> Node:
    """``root`` with every matching call rewritten, inner calls (in arguments) first."""
    if not rewrites:
        return root
    bound = bound_identifiers(root)

    def change(node: Node) -> Node | None:
        if not isinstance(node, Call):
            return None
        for rewrite in rewrites:
            if rewrite.applies(node, bound):
                return rewrite.rewrite(node)
        return None

    return transform(root, change)


def one_element_map(value: Node, name: str, body: Node) -> Node:
    """``[value].map(name, body)[0]``: ``body`` with ``name`` bound to ``value``, evaluated
    once, its errors and cost the expression's own. Not ``cel.bind``: its lazily
    initialised value, inside a comprehension in a variable's scope, was kept by the runtime
    from one iteration to the next (a container's field read for the next container)."""
    mapped = Call("map", (Ident(name), body), ListExpr((value,)))
    return Index(mapped, Literal(0, "int"))


def _type_test(name: str, types: Sequence[str]) -> Node:
    tests = [Call("_==_", (Call("type", (Ident(name),)), Ident(t))) for t in types]
    return tests[0] if len(tests) == 1 else Call("_||_", tuple(tests))


# cel-go's `or` and `orValue` return a receiver that is not an optional as it is (its
# evalOptionalOr / evalOptionalOrValue: `x.orValue(y)` is `x` for a map `x`); the runtime
# has no overload for it and errs. Kubernetes' environment applies cel-go's behaviour
# wherever the receiver's type is not known to be optional (dyn, as Kyverno's `object` and
# every variable are), so a policy such as `c.resources.requests.orValue({}).cpu` runs there.
OPTIONAL_FALLBACKS = frozenset({"or", "orValue"})
_FALLBACK = "assay_optional"


def optional_fallbacks(root: Node, numbers: itertools.count[int]) -> Node:
    """``root`` with each ``r.or(x)`` / ``r.orValue(x)`` giving ``r`` itself when ``r`` is
    not an optional (cel-go), and the optional library's value when it is; ``r`` evaluated
    once (:func:`one_element_map`). ``numbers``: for fresh names, shared by one program."""

    def change(node: Node) -> Node | None:
        if not (isinstance(node, Call) and node.function in OPTIONAL_FALLBACKS):
            return None
        if node.target is None:
            return None
        name = f"{_FALLBACK}_{next(numbers)}"
        call = replace(node, target=Ident(name))
        chosen = Call(
            "_?_:_",
            (
                _type_test(name, ("optional_type",)),
                Call("dyn", (call,)),
                Call("dyn", (Ident(name),)),
            ),
            at=node.at,
        )
        return one_element_map(node.target, name, chosen)

    return transform(root, change)


# cel-go's presence test is false on a value that is neither a map nor a list (null, a
# string: its refQualify), where the runtime errs ("Applying SELECT to non-message type").
# Gatekeeper's `variables.params` is null for a constraint without parameters, and its
# templates test `has(variables.params.exemptImages)`.
_PRESENT = "assay_present"


def base(node: Node) -> Node:
    """Where a chain of selections, indexes and member calls starts."""
    while True:
        if isinstance(node, Select | Index):
            node = node.operand
        elif isinstance(node, Call) and node.target is not None:
            node = node.target
        else:
            return node


def computed_presence(
    root: Node, computed: Callable[[Node], bool], numbers: itertools.count[int]
) -> Node:
    """``root`` with each ``has(e.f)`` whose ``e`` is computed (``computed(e)``: a value
    that may be null or a scalar) false when ``e`` is neither a map nor a list, as
    cel-go's; ``e`` evaluated once, its error kept."""

    def change(node: Node) -> Node | None:
        if not (isinstance(node, Call) and node.function == "has" and node.target is None):
            return None
        if len(node.args) != 1 or not isinstance(node.args[0], Select):
            return None
        select = node.args[0]
        if select.optional or not computed(select.operand):
            return None
        name = f"{_PRESENT}_{next(numbers)}"
        test = Call(
            "_?_:_",
            (
                _type_test(name, ("map", "list")),
                replace(node, args=(replace(select, operand=Ident(name)),)),
                Literal(False, "bool"),
            ),
            at=node.at,
        )
        return one_element_map(select.operand, name, test)

    return transform(root, change)
