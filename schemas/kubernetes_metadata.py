"""Kubernetes object metadata as the API server reads it: names, label keys and values, and
label selectors (the text form ``kubectl -l`` takes, the API's ``{matchLabels,
matchExpressions}`` object, matching one against an object's labels).

The one place these rules live: lookups (the snapshot backend, the test API server),
probe and policy export, policy import, the admission-document checks, the CEL
``format`` library and the declarative documents all use it, so a selector or a name
means the same thing, and is refused for the same reason, at every door. The rules follow
the API server's (apimachinery's name validation and label selector grammar):

- DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter
  or digit, at most 63 characters; a DNS-1123 subdomain: such labels joined by '.', at
  most 253; a DNS-1035 label: a DNS-1123 label starting with a letter.
- qualified name (a label key, an annotation key): an optional DNS-1123 subdomain prefix
  and '/', then a name of at most 63 letters, digits, '-', '_' or '.', starting and ending
  with a letter or digit; at most one '/'.
- label value: empty, or at most 63 characters of the name part's alphabet and shape.
- selector text: requirements joined by ',' (no empty one, no trailing ','): ``key``,
  ``!key``, ``key=value`` / ``key==value`` / ``key!=value`` (value may be empty), ``key in
  (v1,v2)`` / ``key notin (v1,v2)`` (an empty slot is the empty value). ``!=`` and
  ``notin`` also match objects without the label. ``>`` and ``<`` (which the API server
  reads on list requests) are refused: they have no counterpart in a selector object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_LABEL_LENGTH = 63  # a DNS label, a qualified name's name part, a label value
MAX_SUBDOMAIN_LENGTH = 253
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # the label every namespace carries

_DNS1123_LABEL_TEXT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME_PART_TEXT = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS1123_LABEL = re.compile(_DNS1123_LABEL_TEXT)
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL_TEXT}(\.{_DNS1123_LABEL_TEXT})*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_NAME_PART = re.compile(_NAME_PART_TEXT)

# The same rules as JSON Schema patterns, for models whose published schema states them
# (lengths beside them as maxLength where the pattern cannot say them).
LABEL_KEY_PATTERN = (
    rf"^({_DNS1123_LABEL_TEXT}(\.{_DNS1123_LABEL_TEXT})*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"


# -- names ------------------------------------------------------------------------------------
# Each check returns what is wrong with the value, one phrase each (empty: valid), in the
# words the CEL ``format`` library reports them.


def _too_long(value: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters"] if len(value) > limit else []


def _name_errors(value: str, limit: int, pattern: re.Pattern[str], what: str) -> list[str]:
    shape = [] if pattern.fullmatch(value) else [f"must be {what}"]
    return _too_long(value, limit) + shape


def dns1123_label_errors(value: str) -> list[str]:
    what = "a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a "
    return _name_errors(value, MAX_LABEL_LENGTH, _DNS1123_LABEL, what + "letter or digit")


def dns1123_subdomain_errors(value: str) -> list[str]:
    what = "a DNS-1123 subdomain: DNS-1123 labels joined by '.'"
    return _name_errors(value, MAX_SUBDOMAIN_LENGTH, _DNS1123_SUBDOMAIN, what)


def dns1035_label_errors(value: str) -> list[str]:
    what = "a DNS-1035 label: lower-case letters, digits and '-', starting with a letter and "
    return _name_errors(
        value, MAX_LABEL_LENGTH, _DNS1035_LABEL, what + "ending with a letter or digit"
    )


def qualified_name_errors(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        errors: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        errors = (
            ["prefix part must be non-empty"]
            if not prefix
            else [f"prefix part {e}" for e in dns1123_subdomain_errors(prefix)]
        )
    else:
        return ["must be a name, optionally with a DNS subdomain prefix and '/'"]
    if not name:
        return [*errors, "name part must be non-empty"]
    if len(name) > MAX_LABEL_LENGTH:
        errors.append(f"name part must be no more than {MAX_LABEL_LENGTH} characters")
    if not _NAME_PART.fullmatch(name):
        errors.append(
            "name part must be letters, digits, '-', '_' or '.', starting and ending with a "
            "letter or digit"
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    if not value:
        return []
    what = "empty or letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    return _name_errors(value, MAX_LABEL_LENGTH, _NAME_PART, what)


def is_dns1123_label(value: str) -> bool:
    return not dns1123_label_errors(value)


def is_dns1123_subdomain(value: str) -> bool:
    return not dns1123_subdomain_errors(value)


def is_dns1035_label(value: str) -> bool:
    return not dns1035_label_errors(value)


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key (one phrase), or None."""
    errors = qualified_name_errors(key)
    if not errors:
        return None
    return f"the label key {key!r} is not a qualified name ({'; '.join(errors)})"


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value (one phrase), or None."""
    errors = label_value_errors(value)
    return f"{value!r} is not a label value ({'; '.join(errors)})" if errors else None


# -- label selectors --------------------------------------------------------------------------


class SelectorError(ValueError):
    """A label selector (text or object) the API server would refuse; the message says why."""


Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
_SET_OPERATORS = ("In", "NotIn")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabelRequirement(_Strict):
    """One ``matchExpressions`` term of a Kubernetes label selector."""

    key: str = Field(min_length=1, max_length=317)
    operator: Operator
    values: list[str] = Field(default_factory=list)

    def problem(self) -> str | None:
        """Why the API server would refuse this term (one phrase), or None."""
        if problem := label_key_problem(self.key):
            return problem
        if self.operator in _SET_OPERATORS and not self.values:
            return f"the operator {self.operator} of {self.key} needs values"
        if self.operator not in _SET_OPERATORS and self.values:
            return f"the operator {self.operator} of {self.key} takes no values"
        return next(filter(None, map(label_value_problem, self.values)), None)

    def to_api(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "operator": self.operator,
            **({"values": list(self.values)} if self.values else {}),
        }


class LabelSelector(_Strict):
    """A Kubernetes label selector (``matchLabels`` and ``matchExpressions``, ANDed);
    an empty one matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelRequirement] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.matcher()(labels)

    def matcher(self) -> Callable[[Mapping[str, str]], bool]:
        """A predicate on one object's labels, as the API server matches them: every
        ``matchLabels`` pair present, ``In`` the label present with one of the values,
        ``NotIn`` (and ``!=``) the label absent or with none of them, ``Exists`` /
        ``DoesNotExist``. The terms are read once, for matching many label sets."""
        exact = tuple(self.match_labels.items())
        terms = tuple(
            (term.key, term.operator, frozenset(term.values)) for term in self.match_expressions
        )

        def matches(labels: Mapping[str, str]) -> bool:
            for key, value in exact:
                if labels.get(key) != value:
                    return False
            for key, operator, values in terms:
                present = key in labels
                if operator == "In":
                    ok = present and labels[key] in values
                elif operator == "NotIn":
                    ok = not present or labels[key] not in values
                else:
                    ok = present == (operator == "Exists")
                if not ok:
                    return False
            return True

        return matches

    def names_only(self) -> list[str] | None:
        """The namespaces a namespace selector picks when it only names them (by the
        ``kubernetes.io/metadata.name`` label every namespace carries), else None."""
        names: set[str] | None = None
        if self.match_labels:
            if set(self.match_labels) != {NAMESPACE_NAME_LABEL}:
                return None
            names = {self.match_labels[NAMESPACE_NAME_LABEL]}
        for term in self.match_expressions:
            if term.key != NAMESPACE_NAME_LABEL or term.operator != "In":
                return None
            names = set(term.values) if names is None else names & set(term.values)
        return sorted(names) if names is not None else None

    def problem(self) -> str | None:
        """Why the API server would refuse this selector (one phrase), or None."""
        for key, value in self.match_labels.items():
            if problem := label_key_problem(key) or label_value_problem(value):
                return problem
        return next(filter(None, (term.problem() for term in self.match_expressions)), None)

    def contradiction(self) -> str | None:
        """Why this selector can select nothing because it asks one label for values that
        exclude each other (``a=b,a=c``), or None."""
        allowed: dict[str, set[str]] = {k: {v} for k, v in self.match_labels.items()}
        for term in self.match_expressions:
            if term.operator == "In":
                allowed[term.key] = allowed.get(term.key, set(term.values)) & set(term.values)
        for key, values in allowed.items():
            if not values:
                return f"asks the label {key} for two values, so it selects nothing"
        return None

    def to_api(self) -> dict[str, Any]:
        """The selector as the API writes it (``{}``: everything)."""
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [term.to_api() for term in self.match_expressions]
        return out

    @classmethod
    def from_api(cls, data: Any, what: str = "a label selector") -> LabelSelector:
        """A selector object as a document writes it, checked as the API server checks it;
        raises :class:`SelectorError` naming ``what`` and the part that is wrong."""
        if not isinstance(data, Mapping):
            raise SelectorError(f"{what} is not a mapping")
        unknown = set(data) - {"matchLabels", "matchExpressions"}
        if unknown:
            raise SelectorError(f"{what} has fields a label selector does not: {sorted(unknown)}")
        labels = data.get("matchLabels") or {}
        if not isinstance(labels, Mapping):
            raise SelectorError(f"{what}.matchLabels is not a mapping")
        terms = data.get("matchExpressions") or []
        if not isinstance(terms, list):
            raise SelectorError(f"{what}.matchExpressions is not a list")
        selector = cls(
            match_labels={str(k): _scalar(v, f"{what}.matchLabels") for k, v in labels.items()},
            match_expressions=[_requirement(term, what) for term in terms],
        )
        if problem := selector.problem():
            raise SelectorError(f"{what}: {problem}")
        return selector

    @classmethod
    def from_text(cls, text: str | None) -> LabelSelector:
        """The text form (``app=web,tier in (a,b),!canary``); None or blank selects
        everything. Raises :class:`SelectorError` saying which part is wrong."""
        return _Parser(text or "").selector()


def _scalar(value: Any, what: str) -> str:
    if isinstance(value, (Mapping, list)):
        raise SelectorError(f"{what} holds a {type(value).__name__}, not a label value")
    return str(value)


def _requirement(term: Any, what: str) -> LabelRequirement:
    if not isinstance(term, Mapping):
        raise SelectorError(f"{what}.matchExpressions[] is not a mapping")
    unknown = set(term) - {"key", "operator", "values"}
    if unknown:
        raise SelectorError(f"{what}.matchExpressions[] has unknown fields {sorted(unknown)}")
    operator = term.get("operator")
    if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
        raise SelectorError(f"{what} uses the operator {operator!r}, not a label selector's")
    values = term.get("values") or []
    if not isinstance(values, list):
        raise SelectorError(f"{what} values is not a list")
    if not term.get("key"):
        raise SelectorError(f"{what} has a matchExpressions term without a key")
    if problem := label_key_problem(str(term["key"])):  # before the model's own length bound
        raise SelectorError(f"{what}: {problem}")
    return LabelRequirement(
        key=str(term["key"]),
        operator=operator,
        values=[_scalar(v, f"{what} values") for v in values],
    )


# -- the text form ----------------------------------------------------------------------------

# the text's operators as a selector object writes them (``=`` goes to matchLabels first)
_OPERATORS: dict[str, Operator] = {
    "=": "In", "!=": "NotIn", "in": "In", "notin": "NotIn", "": "Exists", "!": "DoesNotExist"
}  # fmt: skip
_SYMBOLS = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_WHITESPACE = " \t\r\n"
_END = ""


def _tokens(text: str) -> list[str]:
    """The selector's tokens: symbols, and runs of anything else between whitespace and
    symbols (keys, values, ``in``, ``notin``); ``""`` ends the list."""
    tokens: list[str] = []
    at = 0
    while at < len(text):
        char = text[at]
        if char in _WHITESPACE:
            at += 1
            continue
        symbol = next((s for s in _SYMBOLS if text.startswith(s, at)), None)
        if symbol is not None:
            tokens.append(symbol)
            at += len(symbol)
            continue
        end = at
        while end < len(text) and text[end] not in _WHITESPACE and text[end] not in "=!(),<>":
            end += 1
        tokens.append(text[at:end])
        at = end
    tokens.append(_END)
    return tokens


def _is_word(token: str) -> bool:
    return token != _END and token not in _SYMBOLS


class _Parser:
    """Reads the text form requirement by requirement (the API server's grammar)."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def _next(self) -> str:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def _peek(self) -> str:
        return self.tokens[self.at]

    @staticmethod
    def _shown(token: str) -> str:
        return "the end" if token == _END else repr(token)

    def selector(self) -> LabelSelector:
        labels: dict[str, str] = {}
        terms: list[LabelRequirement] = []
        if self._peek() == _END:
            return LabelSelector()
        while True:
            key, written, values = self._requirement()
            if written == "=" and labels.get(key, values[0]) == values[0]:
                labels[key] = values[0]
            else:  # a second value asked of one key stays, as an In term: it selects nothing
                operator = _OPERATORS[written]
                terms.append(LabelRequirement(key=key, operator=operator, values=values))
            token = self._next()
            if token == _END:
                return LabelSelector(match_labels=labels, match_expressions=terms)
            if token != ",":
                raise SelectorError(f"found {self._shown(token)} where ',' or the end belongs")
            if not (_is_word(self._peek()) or self._peek() == "!"):
                raise SelectorError(
                    f"found {self._shown(self._peek())} after ',' where a requirement belongs"
                )

    def _requirement(self) -> tuple[str, str, list[str]]:
        token = self._next()
        negated = token == "!"
        if negated:
            token = self._next()
        if not _is_word(token):
            raise SelectorError(f"found {self._shown(token)} where a label key belongs")
        if problem := label_key_problem(token):
            raise SelectorError(problem)
        if negated or self._peek() in (_END, ","):
            return token, "!" if negated else "", []
        operator = self._next()
        if operator in ("in", "notin"):
            values = self._set_values()
        elif operator in ("=", "==", "!="):
            values = [self._exact_value()]
            operator = "!=" if operator == "!=" else "="
        elif operator in (">", "<"):
            raise SelectorError(
                f"the operator {operator!r} has no counterpart in a label selector object"
            )
        else:
            raise SelectorError(
                f"found {self._shown(operator)} after {token!r} where one of =, ==, !=, in, "
                "notin belongs"
            )
        for value in values:
            if problem := label_value_problem(value):
                raise SelectorError(f"{problem} (for {token})")
        return token, operator, values

    def _exact_value(self) -> str:
        if self._peek() in (_END, ","):
            return ""
        token = self._next()
        if not _is_word(token):
            raise SelectorError(f"found {self._shown(token)} where a label value belongs")
        return token

    def _set_values(self) -> list[str]:
        """``(a,b)``; an empty slot (``()``, ``(a,)``, ``(a,,b)``) is the empty value."""
        if (token := self._next()) != "(":
            raise SelectorError(f"found {self._shown(token)} where '(' belongs")
        values: set[str] = set()
        slot: str | None = None
        while True:
            token = self._next()
            if token in (",", ")"):
                values.add(slot or "")
                slot = None
                if token == ")":
                    return sorted(values)
            elif _is_word(token) and slot is None:
                slot = token
            else:
                raise SelectorError(f"found {self._shown(token)} where ',', ')' or a value belongs")
