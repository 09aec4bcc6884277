"""Keeping Secret values inside the process: one scrubber for both backends.

What is judged and what is shown are kept apart. Deterministic evaluation (probes,
imported policies) reads objects as the API server holds them, with one exception;
the scrubber protects *values*, never identifiers, in what leaves the process (model
input, messages, stored runs, reports, sinks, logs).

1. **The Secret itself** (:func:`withhold_secret_values`, when a backend reads an
   object): a Secret's ``data`` and ``stringData`` and the copy of them in its
   ``kubectl.kubernetes.io/last-applied-configuration`` annotation are taken out, as
   if RBAC hid them: absent, never a placeholder a probe could match. Everything else
   of the Secret stays as stored: its name, namespace, labels (a Helm release
   Secret's ``owner: helm, name: RELEASE, status: deployed``), type and its other
   annotations are identifiers, which ``kubectl get secrets`` shows too. The values
   taken out are learned (layer 2), and so is the value of an annotation whose key
   says it is a credential (``vendor.example.com/api-token``); names, labels and
   other annotations never are, so a release name is never scrubbed from the
   workloads named after it. What the model reads of an object (:func:`shown`) is the
   stored object without any last-applied annotation (a second copy of the whole
   object) and, for a Secret, its ``data`` / ``stringData`` keys back with each value
   ``REDACTED`` ("the Secret has a key tls.key" is a legitimate fact), then scrubbed
   (layers 2 and 3).

2. **Known values** (:class:`SecretScrubber` after :meth:`~SecretScrubber.learn`):
   every value hidden in step 1 is searched for wherever else it appears,
   in the forms a copy takes: the whole value if it is one line, else each
   line on its own (one line of a PEM key); each of those as a JSON string
   holds it (``"`` and ``\\`` escaped, a multi-line value on one line with
   ``\\n``, non-ASCII as ``\\uXXXX`` or not, ``/`` as ``\\/`` or not),
   percent-encoded (``%20`` or ``+`` for a space, the escapes in upper or
   lower case, as Python, Go and JavaScript encoders leave characters
   unescaped) and the whole value hex-encoded (lower and upper case); its
   base64 and base64url forms,
   padded or not, of the value with and without the trailing newline of
   ``echo $PW | base64``, at each of the three alignments it can have inside
   a longer base64 text (a ``user:password`` docker ``auth`` field); and the
   credential parts of a structured value (the password of a DSN,
   ``password=...`` in a ``.env`` file, ``"token": "..."`` in JSON). Base64
   forms and long base64-alphabet tokens are found by
   :data:`BASE64_ANCHOR_CHARS` characters from their middle and redacted with
   the whole run of base64 characters around them. Matching is Aho-Corasick
   (``ahocorasick_rs``): a regex alternation of a few thousand literals costs
   minutes per MB, the automaton tens of ms (bench/bench_scrubber.py).

3. **Patterns** (every scrubber, even one that knows no values): the
   password of ``scheme://user:PASSWORD@host``; the value of a ``key=value``
   / ``key: value`` / ``"key": "value"`` / ``--key value`` token whose key
   ends in a credential word (:func:`credential_key`: password, passwd,
   passphrase, secret, token, credentials, authorization, api/access/secret/
   private/... key); the body of a PEM private key block; a JWT; and a
   well-known provider token standing alone, recognised by its own prefix,
   alphabet and length with a word boundary before it (GitHub ``ghp_`` and
   kin, GitLab ``glpat-``, Slack ``xoxb-``, AWS ``AKIA``/``ASIA`` key ids,
   OpenAI/Anthropic ``sk-``, Stripe, Google ``AIza``, npm, PyPI, Hugging Face,
   SendGrid, Docker Hub, Vault, age: workers/engine/toolsets/provider_tokens.py
   says which formats, why each length and alphabet, and which were left out).
   In an object (:meth:`SecretScrubber.scrub_object`) a string under a
   credential key, and the ``value`` of a ``{name: DB_PASSWORD, value: ...}``
   pair, are redacted whatever their text.

   All of it rests on one Aho-Corasick pass over the lower-cased text for
   *hints* (credential words, ``://``, ``eyJ``, ``PRIVATE KEY``, each token
   format's prefixes); a pattern is tried, anchored, only where its hint is,
   so text without a hint costs one automaton scan.

In an object, layers 2 and 3 apply to mapping **keys** too: a key is shown
wherever its object is, and can be a DSN (a ConfigMap keyed by connection
string), a copied Secret value or a bearer token. Keys are searched once, in
the same pass as the object's other strings; only a key that pass hit is
rewritten (see :func:`_rename_keys`; two keys that come out the same are kept
apart with `` (2)``).

**Minimum length.** A known value, or any form of it, shorter than
:data:`MIN_SCRUB_LENGTH` (8) characters is never searched for elsewhere.
Short strings ("true", "admin", "5432", "prod") occur all over ordinary
output; replacing each of them would mangle what the model reads (every
``admin`` in every object) and would itself reveal the value, since the
places where ``5432`` went missing spell out that a Secret holds ``5432``.
Eight characters is where a chance occurrence of a real credential becomes
unlikely and where common password policies begin. Short values are still
hidden in the Secret itself, and a credential key marks its value as secret
at any length (layer 3). A line longer than :data:`MAX_WHOLE_VALUE_CHARS`
is searched for only if it is a base64-alphabet token (by its middle).

**Ordinary words and identifiers are not credentials.** A credential key's value
that is a placeholder (``true``, ``<none>``, ``$VAR``, ``****``) or an ordinary word
of prose (:data:`ORDINARY_WORDS`: "over Secret: the snapshot...", "token: expired")
is left alone, and a "key" that is the last segment of a path (an image
``registry/org/vault-token:1.2``, a file ``/etc/app/token: permission denied``) is
no key at all.

The backends apply layer 1 to every object they read and keep the object so, for
probes and imported policies, which never see a scrubbed value (a label the scrubber
rewrote would no longer match a policy's selector, a ConfigMap value no longer equal
the policy's literal); the model reads :func:`shown` scrubbed by layers 2-3, and the tool
registry applies the run's scrubber once more to every tool output (shell
included). What a probe or policy says about the objects (messages, reasons) is
scrubbed with the backend's scrubber before it leaves (workers/policy_engine/probes/runner.py).
What is stored in Redis or logged passes the pattern layer again
(:data:`PATTERNS`, :func:`scrubbed`): those writers do not know a run's values,
which never reach them unscrubbed.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate
from typing import Any, Generic, TypeVar
from urllib.parse import quote_from_bytes

import ahocorasick_rs
from pydantic import BaseModel

from workers.engine.toolsets.backend import REDACTED
from workers.engine.toolsets.provider_tokens import HINTS as PROVIDER_HINTS
from workers.engine.toolsets.provider_tokens import TokenFormat

MIN_SCRUB_LENGTH = 8
"""Known values (and each form of one) shorter than this are not searched for elsewhere."""

MAX_WHOLE_VALUE_CHARS = 16 * 1024
"""A longer line is searched for only if it is a base64-alphabet token (found by its middle)."""

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
SECRET_VALUE_FIELDS = ("data", "stringData")
"""A Secret's fields that hold its values: withheld from probes, redacted for the model."""

ORDINARY_WORDS = frozenset(
    {"a", "an", "the", "and", "or", "but", "nor", "if", "then", "else", "so", "than", "as",
     "of", "to", "in", "on", "at", "by", "for", "from", "with", "without", "into", "onto",
     "about", "over", "under", "after", "before", "between", "through", "during", "not", "is",
     "are", "was", "were", "be", "been", "being", "am", "has", "have", "had", "do", "does",
     "did", "done", "can", "cannot", "could", "will", "would", "shall", "should", "may",
     "might", "must", "it", "its", "this", "that", "these", "those", "there", "here", "which",
     "who", "whom", "whose", "what", "when", "where", "why", "how", "all", "any", "each",
     "every", "some", "both", "either", "neither", "only", "also", "just", "now", "still",
     "yet", "he", "she", "they", "them", "their", "we", "you", "your", "our", "my", "me", "us",
     "his", "her", "i", "missing", "required", "expired", "invalid", "valid", "empty", "unset",
     "present", "absent", "provided", "found", "rotated", "changed", "updated", "created",
     "deleted", "denied", "refused", "rejected", "accepted"}
)  # fmt: skip
"""Words of prose that follow a credential word in ordinary text ("over Secret: the
snapshot", "Token: expired", "password: required"): never taken for its value. A
credential is not one of these; a placeholder list of the same kind is in
:func:`_secret_text`."""

_CREDENTIAL_WORDS = frozenset(
    {"secret", "token", "credential", "credentials", "apikey", "authorization"}
    | {"privatekey", "secretkey", "accesskey"}
)
_PASSWORD_SUFFIXES = ("password", "passwd", "passphrase")  # also "PGPASSWORD", "dbpassword"
_KEY_QUALIFIERS = frozenset(
    {"api", "access", "secret", "private", "signing", "encryption", "master", "account"}
    | {"client", "ssh", "tls", "ca", "storage", "license"}
)
_IDENTIFIER_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NOT_A_SECRET = frozenset({"", "true", "false", "null", "none", "~", "yes", "no"})
_PEM_ARMOUR = re.compile(r"^-----(BEGIN|END) [A-Z0-9 ]+-----$")

# A token whose key ends in a credential word: ``password=x``, ``"apiKey": "x"``,
# ``DB_PASSWORD: x``, ``--token x``, ``Authorization: Bearer x``. Tried only at the
# start of an identifier holding a hint word; credential_key() confirms the key.
_KEY_AND_SEPARATOR = (
    r"(?P<key>[A-Za-z0-9_.\-]+)"
    r"(?P<sep>[\"']?[ \t]*[:=][ \t]*|[ \t]+)"
    r"(?:(?P<scheme>(?i:bearer|basic|token)[ \t]+)(?=[^\s\"']))?"
)
_KEY_VALUE = re.compile(_KEY_AND_SEPARATOR + r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;&}\]]+)")
# The same up to where a value could begin, without reading it: whether the key is worth it.
_KEY_BEFORE_VALUE = re.compile(_KEY_AND_SEPARATOR + r"(?=[^\s,;&}\]])")
_DSN_PASSWORD = re.compile(
    r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"'<>]*:(?P<password>[^\s/\"'<>]+)@(?=[^\s@/\"'<>])"
)
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY[A-Z ]*)-----"
    r"(?P<body>[A-Za-z0-9+/=\s:,.\-\\]*?)"
    r"(?:-----END (?P=label)-----|(?=[^A-Za-z0-9+/=\s:,.\-\\])|\Z)"
)
_JWT = re.compile(r"eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}")
_KEY_HINTS = ("pass", "secret", "token", "credential", "key", "authorization", "pwd")
# What a hint found in the lower-cased text calls for: a credential key's value, a DSN's
# password, a JWT, a PEM key body, or a provider token of one format (provider_tokens.py).
_KEY, _DSN, _JWT_START, _PEM = "key", "dsn", "jwt", "pem"
_HINT_KINDS: tuple[str | TokenFormat, ...] = (
    *[_KEY] * len(_KEY_HINTS),
    _DSN,
    _JWT_START,
    _PEM,
    *PROVIDER_HINTS.values(),
)
_HINTS_LIST = [*_KEY_HINTS, "://", "eyj", "private key", *PROVIDER_HINTS]
_HINTS = ahocorasick_rs.AhoCorasick(_HINTS_LIST, matchkind=ahocorasick_rs.MatchKind.LeftmostLongest)
_IDENTIFIER_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
BASE64_ANCHOR_CHARS = 24
"""A base64 form, or a long token of base64 characters (a PEM line), is found by 24 characters
from its middle and redacted with the whole run of such characters around them. 24 characters
(about 18 bytes) do not occur by chance, and keep the automaton small however long the value."""

Span = tuple[int, int]
M = TypeVar("M", bound=BaseModel)


# --------------------------------------------------------------------------- credential keys


def credential_key(name: str) -> bool:
    """Whether a key or variable name says its value is a credential.

    The *last* word decides (``DB_PASSWORD``, ``dbPassword``, ``x-api-key``,
    ``client_secret``, ``tls.key``), so names of references and files are
    not credentials: ``secretName``, ``tokenSecretRef``, ``passwordFile``,
    ``max_tokens``. A trailing ``data`` is ignored (``client-key-data``).
    """
    lowered = name.lower()  # most names hold no hint at all: no split, nothing cached
    return any(hint in lowered for hint in _KEY_HINTS) and _credential_words(name)


@lru_cache(maxsize=1024)
def _credential_words(name: str) -> bool:
    words = [w.lower() for w in _IDENTIFIER_WORDS.findall(name)]
    if words and words[-1] == "data":
        words.pop()
    if not words:
        return False
    last = words[-1]
    if last in _CREDENTIAL_WORDS or last.endswith(_PASSWORD_SUFFIXES):
        return True
    if last == "pwd":  # alone it is the working directory
        return len(words) > 1
    return last == "key" and len(words) > 1 and words[-2] in _KEY_QUALIFIERS


def _secret_text(value: str) -> bool:
    """Whether a credential-keyed value is worth hiding (not a placeholder, a reference or
    an ordinary word of prose)."""
    stripped = value.strip().strip("\"'").strip()
    lowered = stripped.lower()
    return (
        lowered not in _NOT_A_SECRET
        and lowered not in ORDINARY_WORDS
        and not stripped.startswith(("<", "$", "{", "[", "|", ">"))
        and set(stripped) - {"*", "x", "X"} != set()
    )


def _run_start(text: str, position: int, chars: frozenset[str], floor: int = 0) -> int:
    """Where the run of ``chars`` ending at ``position`` starts (not before ``floor``)."""
    while position > floor and text[position - 1] in chars:
        position -= 1
    return position


def _key_value_span(text: str, start: int) -> Span | None:
    """The value of a credential token whose key starts at ``start``, if there is one.

    The key is judged before any value is read: most keys holding a hint word are no
    credential (``token_count``), and reading each one's value, which may run on for the
    rest of the text, would cost quadratic time over a long run of such keys.
    """
    if start and text[start - 1] == "/":
        return None  # the last segment of a path (registry/org/vault-token:1.2), not a key
    head = _KEY_BEFORE_VALUE.match(text, start)
    if head is None or not credential_key(head["key"].strip("-")):
        return None
    match = _KEY_VALUE.match(text, start)
    if match is None:
        return None
    if match["sep"].strip() == "" and not match["key"].startswith("-"):
        return None  # "token expired": only a --flag takes its value after a space
    if not _secret_text(match["value"]):
        return None
    begin, end = match.span("value")
    if match["value"][0] in "\"'":
        begin, end = begin + 1, end - 1
    return (begin, end) if end > begin else None


def _value_within(text: str, start: int, end: int) -> bool:
    """Whether the key at ``start`` has no value or one beginning before ``end``.

    Called for a key inside an unquoted credential value already found, which ends at
    ``end``: such a value holds no quote, so a value beginning inside it is unquoted too,
    ends where it ends, and is redacted with it. Reading it again for every key in a
    ``token:token:token:...`` run would take quadratic time.
    """
    head = _KEY_BEFORE_VALUE.match(text, start)
    return head is None or head.end() < end


def pattern_spans(text: str) -> list[Span]:
    """Where in ``text`` the credential-looking parts are (layer 3).

    One Aho-Corasick pass over the lower-cased text finds the few places
    worth a closer look (a hint word, ``://``, ``eyJ``, ``PRIVATE KEY``, a
    provider token's prefix such as ``ghp_`` or ``akia``); each regex is then
    tried only there, anchored, never across the text. Credential keys come
    first: they are most of the hits in ordinary output.
    """
    spans: list[Span] = []
    tried: set[tuple[str, int]] = set()
    last_key_hint, bare_value_end = -1, -1
    lowered = text.lower()
    if len(lowered) != len(text):  # lower() never shortens: equal length, same positions
        lowered = _aligned_lower(text)
    for index, hit, _ in _HINTS.find_matches_as_indexes(lowered):
        kind = _HINT_KINDS[index]
        if kind == _KEY:
            # Each step below reads a bounded stretch, so that a long run of keys (an
            # attacker's log line) costs linear time, not one pass over the rest per key.
            # Walk back no further than the previous credential hint: reaching it means the
            # same identifier, whose key was tried then.
            start = _run_start(
                text, hit, _IDENTIFIER_CHARS, last_key_hint if last_key_hint > 0 else 0
            )
            same_identifier = start == last_key_hint
            last_key_hint = hit
            if same_identifier or (
                start < bare_value_end and _value_within(text, start, bare_value_end)
            ):
                continue
            if value := _key_value_span(text, start):
                spans.append(value)
                if text[value[0] - 1] not in "\"'":
                    bare_value_end = value[1]
        elif kind == _DSN:
            start = _run_start(text, hit, _SCHEME_CHARS)
            if ("dsn", start) not in tried:
                tried.add(("dsn", start))
                if dsn := _DSN_PASSWORD.match(text, start):
                    spans.append(dsn.span("password"))
        elif kind == _JWT_START:
            standalone = hit == 0 or text[hit - 1] not in _BASE64_CHARS
            if standalone and (jwt := _JWT.match(text, hit)):
                spans.append(jwt.span())
        elif kind == _PEM:
            begin = text.rfind("-----BEGIN ", max(0, hit - 40), hit)
            if begin >= 0 and ("pem", begin) not in tried:
                tried.add(("pem", begin))
                pem = _PEM_PRIVATE_KEY.match(text, begin)
                if pem and pem["body"].strip():
                    spans.append(pem.span("body"))
        elif isinstance(kind, TokenFormat) and (token := kind.span(text, hit)):
            spans.append(token)
    return spans


def _aligned_lower(text: str) -> str:
    """``text`` lower-cased with every character at the index it had (the rare slow path).

    The hints are found in the lower-cased text and the regexes tried at the same index
    of the original, so the two must line up. ``str.lower`` keeps the length except for
    ``İ`` (U+0130), which becomes two code points: one of them anywhere in a tool's output
    (a Turkish log line) would shift every later hit, and a JWT or a DSN after it would be
    tried at the wrong place and missed. Such a character is left as it is (no hint holds it).
    pattern_spans() calls this only when ``text.lower()`` came out longer than ``text``.
    """
    return "".join(low if len(low := char.lower()) == 1 else char for char in text)


# --------------------------------------------------------------------------- known values


def _base64_anchors(variants: set[bytes]) -> set[str]:
    """How a base64 / base64url copy of a value looks, alone or inside longer encoded text.

    ``variants`` are the value as stored and with its surrounding whitespace
    changed (they differ only at their ends). For each of the three byte
    alignments the value can have inside a longer encoded text, the part of
    the encoding made only of the value's own bits, and of that the
    :data:`BASE64_ANCHOR_CHARS` characters around the middle of the shortest
    variant, which all variants share. A match is widened to the whole
    encoded run around it, so the automaton stays small however long the
    value, and the rest of an encoded blob holding it goes too.
    """
    anchors: set[str] = set()
    for prefix in range(3):
        cores = []
        for raw in variants:
            encoded = base64.b64encode(b"\0" * prefix + raw).decode("ascii")
            first = -(-8 * prefix // 6)  # the first character made only of the value's bits
            cores.append(encoded[first : 8 * (prefix + len(raw)) // 6])
        shortest = min(len(core) for core in cores)
        offset = max(0, (shortest - BASE64_ANCHOR_CHARS) // 2)
        for core in cores:
            anchor = core[offset : offset + BASE64_ANCHOR_CHARS]
            anchors |= {anchor, anchor.replace("+", "-").replace("/", "_")}
    return anchors


def _anchor(token: str) -> str:
    """The middle :data:`BASE64_ANCHOR_CHARS` characters of a long token, else all of it.

    The middle, not the start: the starts of encoded values are often shared
    (every PEM certificate's base64 begins with ``LS0tLS1CRUdJTiBDRVJU``, every
    RS256 JWT with ``eyJhbGciOiJSUzI1Ni``), their middles are not.
    """
    if len(token) <= BASE64_ANCHOR_CHARS:
        return token
    start = (len(token) - BASE64_ANCHOR_CHARS) // 2
    return token[start : start + BASE64_ANCHOR_CHARS]


def secret_forms(value: str | bytes) -> tuple[set[str], set[str]]:
    """What a copy of this Secret value may show up as (layer 2): (plain forms, base64 anchors).

    Plain: the whole value if it is one line, else each line on its own (PEM
    armour lines are no secret), plus the credential parts of a structured
    value. Base64: see :func:`_base64_anchors`, for the value with and
    without surrounding whitespace and with the newline ``echo`` adds.
    """
    raw = value.encode("utf-8") if isinstance(value, str) else value
    plain: set[str] = set()
    lines: list[str] = []
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        lines = [line.strip() for line in text.strip().splitlines()]
        if len(lines) > 1:
            lines = [line for line in lines if not _PEM_ARMOUR.match(line)]
        plain.update(  # a long token of base64 characters is found by its middle (learn)
            line
            for line in lines
            if len(line) <= MAX_WHOLE_VALUE_CHARS or _BASE64_CHARS.issuperset(line)
        )
        if len(text) <= MAX_WHOLE_VALUE_CHARS:
            plain.update(text[start:end] for start, end in pattern_spans(text))
    if raw.strip():
        # A long base64-alphabet line of a multi-line value (a PEM body line) is left to
        # its anchor: a JSON copy keeps it as it is (the lines stand between \n escapes),
        # and encoding each line of every key would triple the automaton
        # (bench/bench_scrubber.py). A one-line token (an AWS secret key) is encoded.
        # A multi-line form (a PEM body found by the key pattern) is found line by line.
        body_lines = {line for line in plain if _long_base64(line)} if len(lines) > 1 else set()
        one_line = {form for form in plain - body_lines if "\n" not in form}
        plain |= {
            form
            for form in _encoded_forms(raw, one_line)
            if len(form) <= MAX_WHOLE_VALUE_CHARS or _BASE64_CHARS.issuperset(form)
        }
    variants = {raw, raw.strip(), raw.strip() + b"\n"} if raw.strip() else set()
    anchors = _base64_anchors(variants) if variants else set()
    keep = MIN_SCRUB_LENGTH
    return {f for f in plain if len(f) >= keep}, {a for a in anchors if len(a) >= keep} - plain


# Characters each common percent-encoder leaves as they are, besides letters and digits:
# RFC 3986's unreserved ones (Python's quote, Go's QueryEscape), and JavaScript's
# encodeURIComponent, which also keeps ! ' ( ) *.
_URL_SAFE = ("-._~", "-._~!'()*")
_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _long_base64(form: str) -> bool:
    return len(form) > BASE64_ANCHOR_CHARS and _BASE64_CHARS.issuperset(form)


def _encoded_forms(raw: bytes, texts: set[str]) -> set[str]:
    """How a Secret value looks after an encoder copied it: JSON string, percent, hex.

    A value holding ``"`` or ``\\`` changes when it is written into a JSON document
    (a ConfigMap holding ``config.json``); one holding ``@``, ``:`` or a space changes
    in a URL (``postgres://app:p%40ss@db``, a query string); any value becomes hex in a
    dump (``xxd -p``, ``.hex()``). ``texts``: the value's plain forms (the value or its
    lines, the credential parts of a structured value), each encoded as the usual
    encoders write it; hex of the whole raw value. A multi-line value copied into JSON
    is one line, its lines between ``\\n`` escapes: each line's own form is found there.
    Only forms that differ from what they encode are returned.
    """
    forms: set[str] = set()
    for value in texts:
        for ascii_only in (True, False):
            escaped = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
            forms |= {escaped, escaped.replace("/", "\\/")}
        encoded = value.encode("utf-8")
        for safe in _URL_SAFE:
            percent = quote_from_bytes(encoded, safe=safe)
            for spaced in (percent, percent.replace("%20", "+")):
                forms |= {spaced, _PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), spaced)}
    for blob in {raw, raw.strip()}:
        hexed = blob.hex()
        forms |= {hexed, hexed.upper()}
    return forms - texts


class SecretScrubber:
    """Removes Secret values (known ones and credential-looking ones) from text and objects.

    Thread-safe: :meth:`learn` may add values while other threads scrub
    (the live backend learns a cluster's Secrets on its first lookup).
    """

    def __init__(self, secret_values: Iterable[str | bytes] = ()) -> None:
        self._lock = threading.Lock()
        self._plain: set[str] = set()
        self._anchors: set[str] = set()
        # the automaton and, per pattern, whether a match widens to its base64 run
        self._search: tuple[ahocorasick_rs.AhoCorasick, list[bool]] | None = None
        self.learn(secret_values)

    @property
    def known_forms(self) -> int:
        """How many strings are searched for (0: patterns only)."""
        return len(self._plain) + len(self._anchors)

    def learn(self, secret_values: Iterable[str | bytes]) -> None:
        """Search for these values (raw Secret values, not base64 ``data``) from now on."""
        plain: set[str] = set()
        anchors: set[str] = set()
        for value in secret_values:
            more_plain, more_anchors = secret_forms(value)
            anchors |= more_anchors
            for form in more_plain:  # a long token (a PEM line) is found by its start too
                if len(form) > BASE64_ANCHOR_CHARS and _BASE64_CHARS.issuperset(form):
                    anchors.add(_anchor(form))
                else:
                    plain.add(form)
        with self._lock:
            if plain <= self._plain and anchors <= self._anchors:
                return
            self._plain |= plain
            self._anchors = (self._anchors | anchors) - self._plain
            patterns = [*self._plain, *self._anchors]
            widen = [False] * len(self._plain) + [True] * len(self._anchors)
            automaton = ahocorasick_rs.AhoCorasick(
                patterns, matchkind=ahocorasick_rs.MatchKind.LeftmostLongest
            )
            self._search = (automaton, widen)

    def _spans(self, text: str) -> list[Span]:
        spans = pattern_spans(text)
        search = self._search
        if search is not None:
            automaton, widen = search
            for index, start, end in automaton.find_matches_as_indexes(text):
                spans.append(_base64_run(text, start, end) if widen[index] else (start, end))
        return spans

    def redactions(self, text: str) -> list[Span]:
        """Where :meth:`text` puts ``REDACTED`` in ``text``: sorted, not overlapping.

        For a caller that must know where the text changed (the tool registry keeps
        the spans of an output that repeat the model's arguments, workers/engine/toolsets/echo.py).
        """
        spans = self._spans(text)
        return _merged(spans) if spans else []

    def text(self, text: str) -> str:
        """``text`` with every secret part replaced by ``REDACTED``."""
        spans = self.redactions(text)
        if not spans:
            return text
        pieces: list[str] = []
        position = 0
        for start, end in spans:
            pieces += [text[position:start], REDACTED]
            position = end
        pieces.append(text[position:])
        return "".join(pieces)

    def scrub_object(self, value: Any) -> Any:
        """Scrub every string inside a JSON-like value, in place; returns the value.

        One pass first collects the object's strings and notes any credential
        structure (a credential key, a ``{name: X_PASSWORD, value: ...}``
        pair, a ``--password`` argument); one search over all the strings
        then decides whether each string needs its own. Most objects hold
        nothing to hide and are not walked again.
        """
        return self._scrubbed(value)[0]

    def _scrubbed(self, value: Any, plain_keys: frozenset[str] = frozenset()) -> tuple[Any, bool]:
        """(the value scrubbed in place, whether it held anything to look at more closely).

        ``plain_keys``: dict keys whose text need not be searched (a model's own field
        names); a credential key among them still marks its value, as everywhere.
        """
        found = self._findings(value, plain_keys)
        if found is None:
            return value, False
        return self._walk(value, *found), True

    def _findings(
        self, value: Any, plain_keys: frozenset[str] = frozenset()
    ) -> tuple[bool, frozenset[str]] | None:
        """None when ``value`` holds nothing to hide; else (whether its strings must each be
        searched, the strings the object-wide search hit) for :meth:`_walk`."""
        strings: list[str] = []
        structured = _collect(value, strings, plain_keys)
        spans = self._spans("\n".join(strings))
        if not (structured or spans):
            return None
        # The one search above already says which strings hold a secret: a dict key is
        # rewritten only if it is one of them, never searched again on its own.
        return bool(spans), _hit_strings(strings, spans) if spans else frozenset()

    def scrubbed_copy(self, value: Any) -> Any:
        """A scrubbed copy, for values the caller does not own (a log line's fields)."""
        return self.scrub_object(_copy_json(value))

    def scrubbed_view(self, value: Any) -> Any:
        """``value`` itself when it holds nothing to hide, else a scrubbed copy; ``value`` is
        never changed. For objects kept as stored for other readers (a snapshot's objects,
        which probes judge): most hold nothing to hide and cost no copy."""
        found = self._findings(value)
        return value if found is None else self._walk(_copy_json(value), *found)

    def _walk(
        self, value: Any, search_each: bool, secret_keys: frozenset[str] = frozenset()
    ) -> Any:
        """Scrub ``value`` in place. ``secret_keys``: the strings the object-wide search
        hit; a dict key among them is rewritten (a key can be a DSN, a token, a copied
        Secret value, and a key is shown wherever its object is)."""
        if isinstance(value, str):
            return self.text(value) if search_each else value
        if isinstance(value, dict):
            hidden_value = _hides_value(value)
            rename = False
            for key, item in value.items():
                credential = _credential_field(key) or (hidden_value and key == "value")
                if credential and isinstance(item, str) and _secret_text(item):
                    value[key] = REDACTED
                else:
                    value[key] = self._walk(item, search_each, secret_keys)
                rename = rename or (bool(secret_keys) and key in secret_keys)
            if rename:
                _rename_keys(value, secret_keys, self.text)
        elif isinstance(value, list):
            hide_next = False
            for index, item in enumerate(value):
                if hide_next and isinstance(item, str) and _secret_text(item):
                    value[index] = REDACTED
                else:
                    value[index] = self._walk(item, search_each, secret_keys)
                hide_next = _credential_flag(item)
        return value

    in_place = scrub_object  # the name the snapshot backend has always used


def _base64_run(text: str, start: int, end: int) -> Span:
    """The whole base64 run (with its padding) around a match."""
    start = _run_start(text, start, _BASE64_CHARS)
    while end < len(text) and text[end] in _BASE64_CHARS:
        end += 1
    while end < len(text) and text[end] == "=":
        end += 1
    return start, end


def _hit_strings(strings: list[str], spans: list[Span]) -> frozenset[str]:
    """The strings of ``strings`` (joined by newlines, as searched) that ``spans`` touch.

    Why map back rather than search each key: an object's keys are mostly field and
    label names repeated across thousands of objects; the joined search has already
    looked at every one of them once, and only the few it hit need a closer look.
    """
    starts = list(accumulate((len(string) + 1 for string in strings), initial=0))
    hit: set[str] = set()
    for begin, end in spans:
        index = max(0, bisect_right(starts, begin) - 1)
        while index < len(strings) and starts[index] < max(end, begin + 1):
            hit.add(strings[index])
            index += 1
    return frozenset(hit)


def _rename_keys(
    mapping: dict[Any, Any], secret_keys: frozenset[str], scrub: Callable[[str], str]
) -> None:
    """Rewrite the keys of ``mapping`` that are in ``secret_keys`` with ``scrub``, in place.

    The order of the entries is kept. Two keys that scrub to the same text (two DSNs
    differing only in their password) must not merge, losing one entry: a later one
    gets `` (2)``, `` (3)``... after it, never taking the name of a key left as it was.
    """
    renamed = {key: scrub(key) for key in mapping if isinstance(key, str) and key in secret_keys}
    renamed = {key: new for key, new in renamed.items() if new != key}
    if not renamed:
        return
    taken: set[Any] = {key for key in mapping if key not in renamed}
    items = list(mapping.items())
    mapping.clear()
    for key, item in items:
        new = renamed.get(key, key)
        if key in renamed:
            candidate, number = new, 1
            while candidate in taken:
                number += 1
                candidate = f"{new} ({number})"
            new = candidate
            taken.add(new)
        mapping[new] = item


def _merged(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@lru_cache(maxsize=4096)
def _credential_field(key: Any) -> bool:
    """credential_key() for dict keys, which repeat across objects (field names, label keys)."""
    return isinstance(key, str) and credential_key(key)


def _hides_value(mapping: dict[Any, Any]) -> bool:
    """``{name: DB_PASSWORD, value: ...}``: an env var (or parameter) named like a credential."""
    name = mapping.get("name")
    return "value" in mapping and isinstance(name, str) and credential_key(name)


def _credential_flag(item: Any) -> bool:
    """``--password`` as one argument: the next argument is its value."""
    return (
        isinstance(item, str)
        and item.startswith("-")
        and "=" not in item
        and credential_key(item.lstrip("-"))
    )


def _collect(value: Any, into: list[str], plain_keys: frozenset[str] = frozenset()) -> bool:
    """Append every string (keys too, but ``plain_keys``) to ``into``; whether any credential
    structure was seen.

    Iterative and order-free: this runs over every object a list returns.
    """
    found = False
    append = into.append
    stack = [value]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is str:
            append(current)
        elif kind is dict:
            found = found or _hides_value(current)
            for key, item in current.items():
                if type(key) is str:
                    if key not in plain_keys:
                        append(key)
                    if type(item) is str:
                        append(item)
                        found = found or _credential_field(key)
                        continue
                stack.append(item)
        elif kind is list or kind is tuple:
            for item in current:
                if type(item) is str:
                    append(item)
                    found = found or (item[:1] == "-" and _credential_flag(item))
                else:
                    stack.append(item)
    return found


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy_json(item) for item in value]
    return value


PATTERNS = SecretScrubber()
"""The pattern layer alone: for writers that never see a run's known values (store, logs)."""


@dataclass(frozen=True)
class Scrubbed(Generic[M]):
    """A scrubbed model and its scrubbed JSON dump (the fields searched or found clean)."""

    model: M
    dump: dict[str, Any]


def scrubbed(
    model: M,
    *,
    keep: frozenset[str] = frozenset(),
    scrubber: SecretScrubber | None = None,
    revalidate: bool = True,
    clean: Mapping[str, Any] | None = None,
) -> Scrubbed[M]:
    """``model`` with every string field scrubbed by ``scrubber`` (default :data:`PATTERNS`;
    the engine passes the run's own, which knows its Secrets), and the dump that was
    scrubbed; ``.model`` is a copy unless nothing needed changing (``revalidate``).

    ``keep`` names top-level fields left as they are (a run's request is the
    user's own input, stored verbatim so the run can be evaluated again).

    ``revalidate=False``: when the scrubber found nothing to look at more closely, the
    model itself is returned, not a copy validated from its dump (a model dumps what it
    holds; only a value the scrub changed needs checking again). The engine and the
    store's verdict write pass it: validating an unchanged 3-step report cost 3% of an
    evaluation's instructions, every time. Checkpoints keep the default.

    ``clean``: top-level fields' JSON dumps that a scrubber at least as thorough as this
    one already produced (the engine's, with the run's Secret values and these patterns,
    ``RunReport._scrubbed_dump``). A field whose dump still equals its entry is not searched
    again; one that changed since, even in place deep inside, is. The store's pattern pass
    over an engine's report so searches only what was added after the engine (the attempt
    count, a probe's outcome), not the steps again (about 6% of an evaluation's
    instructions).
    """
    data = model.model_dump(mode="json", exclude=set(keep))
    search = (
        data
        if clean is None
        else {name: value for name, value in data.items() if clean.get(name, _ABSENT) != value}
    )
    _, looked = (scrubber or PATTERNS)._scrubbed(search, _field_names(type(model)))
    if search is not data:
        data.update(search)  # a top-level string the walk replaced
    if not looked and not revalidate:
        return Scrubbed(model, data)
    kept = {name: getattr(model, name) for name in keep}
    return Scrubbed(type(model).model_validate({**data, **kept}), data)


_ABSENT = object()


@lru_cache(maxsize=64)
def _field_names(model_type: type[BaseModel]) -> frozenset[str]:
    """Every property name in the model's JSON schema, its nested models' included.

    A dumped report's keys are mostly these (about half its strings, and every
    ``*_tokens`` key was a hint the pattern layer then tried a regex at); they are the
    schema's own identifiers, never secret text, so their text is not searched.
    """
    names: set[str] = set()
    pending: list[Any] = [model_type.model_json_schema(by_alias=False, mode="serialization")]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                names.update(key for key in properties if isinstance(key, str))
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return frozenset(names)


# --------------------------------------------------------------------------- the Secret itself


@dataclass(frozen=True)
class Withheld:
    """What :func:`withhold_secret_values` took out of one Secret.

    ``values``: raw (``data`` base64-decoded), for :meth:`SecretScrubber.learn`.
    ``keys``: per field taken out, its keys (None: the field was no mapping), so the model
    can still read which keys the Secret has. ``order``: the object's top-level fields as
    read, so the model's view puts them back where the server had them.
    """

    values: tuple[str | bytes, ...] = ()
    keys: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    order: tuple[str, ...] = ()


NOTHING_WITHHELD = Withheld()


def is_secret(obj: Any) -> bool:
    """Whether ``obj`` is a Secret (any apiVersion: a copy under another group is one too)."""
    return isinstance(obj, dict) and obj.get("kind") == "Secret"


def withhold_secret_values(obj: dict[str, Any]) -> Withheld:
    """Take a Secret's values out of ``obj`` in place, as if RBAC hid them; anything else
    is left exactly as read.

    Taken out: ``data``, ``stringData`` and the last-applied-configuration annotation (the
    manifest, values included). Learned besides (returned, not taken out): the value of an
    annotation whose key says it is a credential. Never learned: the Secret's name,
    namespace, labels or other annotations, which are identifiers.
    """
    if not is_secret(obj):
        return NOTHING_WITHHELD
    order = tuple(obj)
    values: list[str | bytes] = []
    keys: dict[str, tuple[str, ...] | None] = {}
    for name in SECRET_VALUE_FIELDS:
        if name in obj:
            value = obj.pop(name)
            keys[name] = tuple(str(key) for key in value) if isinstance(value, dict) else None
            values += _raw_values(value, encoded=name == "data")
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        applied = annotations.pop(LAST_APPLIED_ANNOTATION, None)
        if applied is not None:
            values += _applied_values(applied)
        values += [
            value
            for key, value in annotations.items()
            if isinstance(value, str) and _credential_field(key) and _secret_text(value)
        ]
    return Withheld(tuple(values), keys, order)


def _raw_values(value: Any, *, encoded: bool) -> list[str | bytes]:
    """A withheld field's values as the scrubber learns them (``data``'s decoded)."""
    items = value.values() if isinstance(value, dict) else [value]
    raw: list[str | bytes] = []
    for item in items:
        if isinstance(item, str):
            decoded = _decoded(item) if encoded else None
            raw.append(decoded if decoded is not None else item)
        elif isinstance(item, bytes):  # YAML's !!binary, already decoded
            raw.append(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):  # unquoted number
            raw.append(str(item))
    return raw


def _applied_values(applied: Any) -> list[str | bytes]:
    """The values in a Secret's last-applied manifest (they may be older than ``data``);
    the whole text when it is not one (an unreadable copy is learned whole)."""
    try:
        manifest = json.loads(applied) if isinstance(applied, str) else None
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        return [applied] if isinstance(applied, str) else []
    return [
        *_raw_values(manifest.get("data") or {}, encoded=True),
        *_raw_values(manifest.get("stringData") or {}, encoded=False),
    ]


def shown(obj: dict[str, Any], withheld: Withheld = NOTHING_WITHHELD) -> dict[str, Any]:
    """``obj`` as the model reads it, before scrubbing: ``obj`` itself when that is the
    same, else a new object sharing what did not change.

    The last-applied-configuration annotation is left out of every object (a second copy
    of the whole object, and of a Secret's values); a Secret's withheld fields are back
    with each key's value ``REDACTED``, where the server had them.
    """
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    applied = isinstance(annotations, dict) and LAST_APPLIED_ANNOTATION in annotations
    if not (applied or withheld.keys):
        return obj
    view = dict(obj)
    if applied:
        assert isinstance(metadata, dict) and isinstance(annotations, dict)
        view["metadata"] = {
            **metadata,
            "annotations": {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION},
        }
    if withheld.keys:
        for name, keys in withheld.keys.items():
            view[name] = REDACTED if keys is None else dict.fromkeys(keys, REDACTED)
        position = {name: index for index, name in enumerate(withheld.order)}
        view = dict(sorted(view.items(), key=lambda item: position.get(item[0], len(position))))
    return view


def _decoded(value: str) -> bytes | None:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
