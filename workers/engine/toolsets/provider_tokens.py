"""Well-known provider tokens standing alone: credentials recognised by their own shape.

The rest of the pattern layer (workers/engine/toolsets/redaction.py) finds a credential by
what surrounds it: ``password=...``, ``"apiKey": "..."``, ``Authorization: Bearer ...``,
a DSN's password. A token pasted into free text has none of that (``cloning with
ghp_...``, ``export OPENAI_KEY sk-proj-...``, a presigned URL holding ``AKIA...``), but
many providers now issue tokens that announce themselves: a fixed, case-sensitive prefix,
then a random body of a documented alphabet and length. Secret scanners (GitHub secret
scanning, gitleaks, trufflehog) rely on the same property. :data:`TOKEN_FORMATS` is the
curated list this project recognises.

**What each format must satisfy, and why.** The scrubber runs over everything a
Kubernetes lookup returns: object names, labels, image references, UIDs, hashes, the
base64 of ordinary data. A rule belongs here only if its shape alone makes a false
positive on that data very unlikely:

* **A word boundary before the prefix.** The character before a token must not be a
  letter, a digit, ``_`` or ``-`` (:data:`GLUE`), so ``mydisk-...``, ``task-...``,
  ``Slovakia``, ``msg.`` or ``x-sk-...`` never start a token. A ``\\n``,
  ``\\r`` or ``\\t`` escape counts as a boundary: a token at the start of a line inside a
  JSON-escaped log message still follows a backslash-n. Punctuation, quotes, ``=``, ``:``,
  ``/`` and ``@`` are boundaries: ``https://ghp_...@github.com`` is how a token is put in
  a clone URL.
* **The documented length as a minimum** (exact where the provider fixes it), so a prefix
  followed by a short word (``sk-learn``, ``npm_config``) is no token.
* **A body that ordinary names cannot spell.** Every rule needs something a DNS-1123 name
  or label (lower-case letters, digits, ``-``, ``.``) never has: an ``_`` in the prefix, an
  upper-case prefix, or a body that mixes upper- and lower-case letters. (Slack's is the
  one exception: its ``xoxp-`` tokens are all lower-case, so numeric ids followed by 32+
  hex characters also count; a name would have to read ``xoxp-<number>-<32+ hex>`` to be
  taken for one.) A random body of
  20 or more base62/base64url characters lacks one of the two cases with a probability of
  at most about 6 in 100,000 (20 characters, GitLab's shortest), usually far less; that is
  the price of never taking a lower-case hash, a UUID, a git SHA or a generated name
  (``sk-prod-web-7f9c2ba4e8``) for a token. Lower-case identifiers (``npm_package_name``,
  ``ghs_refresh_interval``) fail the same test.

**Included** (prefix: body alphabet, length; why that length):

* GitHub (``ghp_`` personal, ``gho_`` OAuth, ``ghu_`` user-to-server, ``ghs_`` installation,
  ``ghr_`` refresh): 36 base62 characters today (30 random and a 6-character checksum), at
  least 36 accepted because GitHub reserves longer tokens, and up to two dot- or
  dash-separated segments after them for the longer, JWT-like stateless installation
  tokens; mixed case.
* GitHub fine-grained (``github_pat_``): 82 characters of ``[A-Za-z0-9_]`` (22, ``_``, 59);
  at least 82; mixed case.
* GitLab (``glpat-`` personal/project/group, ``gldt-`` deploy, ``glrt-`` runner): at least
  20 of ``[A-Za-z0-9_-]`` (the documented legacy length), with the ``.NN.xxxx`` version and
  checksum tail of newer tokens included; mixed case.
* Slack (``xoxb-``, ``xoxp-``, ``xoxa-``, ``xoxr-``, ``xoxs-``, ``xoxe-`` and ``xapp-``): a
  number, a dash, then at least 16 of ``[A-Za-z0-9-]``, holding an upper-case letter (bot,
  app and rotating tokens) or ending in numeric ids and 32+ hex characters (user and
  legacy workspace tokens), which a name that merely starts ``xoxb-1-`` does not.
* AWS access key ids (``AKIA`` long-term, ``ASIA`` temporary): exactly 16 of ``[A-Z0-9]``
  (AWS uses base32, ``[A-Z2-7]``; the wider set costs nothing); the prefix is matched
  upper-case, so the ``asia-east1`` zones and ``Slovakia`` never are.
* OpenAI and Anthropic (``sk-``, covering ``sk-proj-``, ``sk-svcacct-``, ``sk-admin-``,
  ``sk-ant-api03-``): at least 32 of ``[A-Za-z0-9_-]`` after ``sk-`` (legacy OpenAI keys
  have 48, project keys over 150, Anthropic keys about 100), holding a run of 12+ letters
  and digits that mixes both cases and a digit (:func:`random_run`). ``sk-`` is the weakest
  prefix here, so it asks the most of the body: ``sk-no-key-configured``, ``sk-learn``,
  lower-case hex and ``sk-Title-Case-Words-2`` stay.
* Stripe secret and restricted keys (``sk_live_``, ``rk_live_``, ``sk_test_``,
  ``rk_test_``): at least 24 base62 (older keys have 24, newer ones about 100); mixed case.
* Google API keys (``AIza``): exactly 35 of ``[A-Za-z0-9_-]``.
* npm (``npm_``): exactly 36 base62 (30 random and a checksum, as GitHub's); mixed case.
* PyPI (``pypi-AgEIcHlwaS5vcmc`` and TestPyPI's ``pypi-AgENdGVzdC5weXBpLm9yZw``, the
  base64 of the macaroon's location): at least 50 more of ``[A-Za-z0-9_-]`` (real ones run
  to about 180).
* Hugging Face (``hf_``): at least 34 base62 (34 letters today); mixed case.
* SendGrid (``SG.``): exactly 22 and 43 of ``[A-Za-z0-9_-]`` around a second dot.
* Docker Hub personal access tokens (``dckr_pat_``): at least 27 of ``[A-Za-z0-9_-]``; mixed
  case. They are what an image pull secret or a CI job pulling images holds.
* HashiCorp Vault service and batch tokens (``hvs.``, ``hvb.``): at least 24 of
  ``[A-Za-z0-9_-]`` (real ones are about 95 and 130); mixed case. Vault's agent injector
  and sidecars hand them to pods inside clusters.
* age secret keys (``AGE-SECRET-KEY-1``): exactly 58 Bech32 characters, upper-case, as SOPS
  and Flux keep them.

**Left out**, and why:

* Credentials with no prefix (AWS secret access keys, Azure storage keys, Datadog and most
  other 32/40-character keys): by shape they are any base64 or hex string. The
  ``key=value`` layer catches them under a credential-like key (``aws_secret_access_key``).
* ``sk-`` keys whose body is short or lower-case hex (``sk-1234``, LiteLLM's 22-character
  virtual keys, DeepSeek's ``sk-`` + 32 hex): the first are words, the second are what a
  hash or a generated Kubernetes name looks like.
* Hex-bodied tokens with a short or word-like prefix (GitLab ``glptt-`` + 40 hex,
  Databricks ``dapi`` + 32 hex, Twilio ``SK`` + 32 hex): hex is every hash and git SHA, and
  nothing in their body tells them apart from one.
* Identifiers that are not secrets: AWS unique ids (``AIDA``, ``AROA``, ``ANPA``), Stripe
  publishable keys (``pk_live_``), Google OAuth client ids. They are meant to be seen.
* Vault's legacy ``s.`` tokens: a two-character prefix ends half the sentences in English.
* Slack incoming-webhook URLs and other secrets shaped as URLs: not a token prefix; a DSN
  with a password is already caught.

**Cost.** No pattern can run on for long past a boundary it accepted: a body is one run
of characters that, before a prefix, would make it glued (so the hints inside a body are
refused at once), plus at most two ``.``-separated segments. Each character is therefore
read by a bounded number of matches, whatever an attacker writes into a log (a chain of
``ghp_...`` tokens joined by dots would take quadratic time if segments were unbounded).

Each format names lower-case *hints* (where its tokens start); they join the
pattern layer's one Aho-Corasick pass over the lower-cased text, and a format's regex is
tried, anchored, only at a hint that has a boundary before it. Text without a hint pays
only for the automaton's slightly larger pattern set (bench/bench_scrubber.py). Hints are
at least three characters long: one two-character hint made the automaton's SIMD
prefilter coarser and its scan about twice as slow (measured). That prefilter also
changes strategy above 32 patterns: the 37 used now scanned faster than 24 to 32 did, so
measure again when the hint list changes.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass

Span = tuple[int, int]

GLUE = frozenset(string.ascii_letters + string.digits + "_-")
"""Characters that, right before a prefix, make it part of a longer word (``mydisk-``)."""

_ESCAPES = frozenset("nrt")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{12,}")
_SLACK_HEX_TAIL = re.compile(r"(?:[0-9]+-)+[0-9a-f]{32,}")


def mixed_case(body: str) -> bool:
    """An upper-case and a lower-case letter: random base62, never a DNS name or a hash.

    (Bodies are ASCII, as the patterns allow: a letter changes under ``lower()`` exactly
    when it is upper-case.)
    """
    return body.lower() != body and body.upper() != body


def random_run(body: str) -> bool:
    """A run of 12+ letters and digits holding both cases and a digit (for ``sk-``).

    ``sk-`` is the weakest prefix here: two letters, also Slovak's language code. Random
    base64url has a separator about every 32 characters and mixes cases and digits inside
    its runs; words joined by dashes (``sk-Release-Notes-For-Version-2``) have short runs,
    capitalised at their start only. Simulated on random base64url, a body of 93 characters
    (an Anthropic key's) lacks such a run about once in 100,000 draws, one of 150 (an OpenAI
    project key's) never did; legacy OpenAI keys are one 48-character run holding
    ``T3BlbkFJ``. The price is paid by short keys of other providers: at 32 characters,
    about 1 in 30 lacks such a run and is left alone.
    """
    return any(mixed_case(run) and not run.isalpha() for run in _ALNUM_RUN.findall(body))


def slack_body(body: str) -> bool:
    """An upper-case letter (bot, app, rotating tokens) or numeric ids then 32+ hex (user
    and legacy workspace tokens, all lower-case): ``xoxb-`` and a few words is no token."""
    return body.lower() != body or _SLACK_HEX_TAIL.fullmatch(body) is not None


def any_body(body: str) -> bool:
    """No further test: the prefix and the exact length already say enough."""
    return True


@dataclass(frozen=True)
class TokenFormat:
    """One provider's token format.

    ``hints``: lower-case strings the pattern layer's automaton looks for, each where a
    token of this format starts. ``pattern``: the whole token, case-sensitive, matched at
    a hint; its ``body`` group is what ``accepts`` judges.
    """

    provider: str
    hints: tuple[str, ...]
    pattern: re.Pattern[str]
    accepts: Callable[[str], bool] = any_body

    def span(self, text: str, start: int) -> Span | None:
        """Where the token starting at ``start`` (a hint) lies, if one of this format does."""
        if start and text[start - 1] in GLUE and not _escape_before(text, start):
            return None
        match = self.pattern.match(text, start)
        if match is None or not self.accepts(match["body"]):
            return None
        return match.span()


def _escape_before(text: str, start: int) -> bool:
    """``\\n``, ``\\r`` or ``\\t`` right before ``start``: a line break in JSON-escaped text."""
    return start >= 2 and text[start - 1] in _ESCAPES and text[start - 2] == "\\"


_BASE62 = "A-Za-z0-9"
_URLSAFE = "A-Za-z0-9_-"


def _format(
    provider: str, hints: tuple[str, ...], pattern: str, accepts: Callable[[str], bool]
) -> TokenFormat:
    return TokenFormat(provider, hints, re.compile(pattern), accepts)


TOKEN_FORMATS: tuple[TokenFormat, ...] = (
    _format(
        "GitHub token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        rf"gh[pousr]_(?P<body>[{_BASE62}_]{{36,}}(?:[.-][{_BASE62}_]+){{0,2}})",
        mixed_case,
    ),
    _format(
        "GitHub fine-grained token",
        ("github_pat_",),
        rf"github_pat_(?P<body>[{_BASE62}_]{{82,}})",
        mixed_case,
    ),
    _format(
        "GitLab token",
        ("glpat-", "gldt-", "glrt-"),
        rf"gl(?:pat|dt|rt)-(?P<body>[{_URLSAFE}]{{20,}})(?:\.[{_BASE62}]+){{0,2}}",
        mixed_case,
    ),
    _format(
        "Slack token",
        ("xox", "xapp-"),
        r"(?:xox[abeprs]|xapp)-(?P<body>[0-9]+-[A-Za-z0-9-]{16,})",
        slack_body,
    ),
    _format(
        "AWS access key id",
        ("akia", "asia"),
        r"(?:AKIA|ASIA)(?P<body>[A-Z0-9]{16})(?![A-Za-z0-9_])",
        any_body,
    ),
    _format(
        "OpenAI or Anthropic key",
        ("sk-",),
        rf"sk-(?P<body>[{_URLSAFE}]{{32,}})",
        random_run,
    ),
    _format(
        "Stripe secret or restricted key",
        ("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
        rf"[sr]k_(?:live|test)_(?P<body>[{_BASE62}]{{24,}})",
        mixed_case,
    ),
    _format(
        "Google API key",
        ("aiza",),
        rf"AIza(?P<body>[{_URLSAFE}]{{35}})(?![{_URLSAFE}])",
        any_body,
    ),
    _format(
        "npm token",
        ("npm_",),
        rf"npm_(?P<body>[{_BASE62}]{{36}})(?![{_BASE62}_])",
        mixed_case,
    ),
    _format(
        "PyPI token",
        ("pypi-age",),
        rf"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)(?P<body>[{_URLSAFE}]{{50,}})",
        any_body,
    ),
    _format(
        "Hugging Face token",
        ("hf_",),
        rf"hf_(?P<body>[{_BASE62}]{{34,}})(?![{_BASE62}_])",
        mixed_case,
    ),
    _format(
        "SendGrid key",
        ("sg.",),
        rf"SG\.(?P<body>[{_URLSAFE}]{{22}}\.[{_URLSAFE}]{{43}})(?![{_URLSAFE}])",
        any_body,
    ),
    _format(
        "Docker Hub token",
        ("dckr_pat_",),
        rf"dckr_pat_(?P<body>[{_URLSAFE}]{{27,}})",
        mixed_case,
    ),
    _format(
        "Vault token",
        ("hvs.", "hvb."),
        rf"hv[sb]\.(?P<body>[{_URLSAFE}]{{24,}})",
        mixed_case,
    ),
    _format(
        "age secret key",
        ("age-secret-key-1",),
        r"AGE-SECRET-KEY-1(?P<body>[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})(?![A-Za-z0-9_])",
        any_body,
    ),
)
"""The formats recognised, in no particular order (no two share a hint)."""

HINTS: dict[str, TokenFormat] = {hint: fmt for fmt in TOKEN_FORMATS for hint in fmt.hints}
"""Each lower-case hint and the format whose tokens start with it."""
