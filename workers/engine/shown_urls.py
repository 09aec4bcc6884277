"""A URL as assay may print or log it: with the credentials it carries masked.

Every URL a command prints (a Redis or broker URL, a model endpoint) can hold a credential
the user put there: ``redis://:PASSWORD@host``, ``https://user:KEY@gateway``, a token as
the whole user part (``https://TOKEN@host``), or a key in the query
(``?api_key=...``). Output, logs and errors show :func:`shown_url` of it, never the URL.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit

MASK = "***"
# Query parameters that carry a credential by their name (api_key, access_token, sig, ...).
_SECRET_PARAMETER = re.compile(
    r"(key|token|secret|password|passwd|pwd|auth|sig|signature|credential)", re.IGNORECASE
)


def shown_url(url: str) -> str:
    """``url`` with its password, a bare user token and secret query values masked (each
    URL of a ``;``-separated list, as a Sentinel broker URL is written)."""
    return ";".join(_shown_one(part) for part in url.split(";"))


def _shown_one(url: str) -> str:
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:  # a bracket left open: show nothing of it
        return MASK
    shown = url
    if password is not None or (username and parts.scheme in ("http", "https")):
        host = parts.netloc.rpartition("@")[2]
        user = f"{username or ''}:{MASK}" if password is not None else MASK
        shown = shown.replace(parts.netloc, f"{user}@{host}", 1)
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        if any(_SECRET_PARAMETER.search(name) for name, _ in pairs):
            masked = [(n, MASK if _SECRET_PARAMETER.search(n) else v) for n, v in pairs]
            shown = shown.replace("?" + parts.query, "?" + urlencode(masked, safe="*"), 1)
    return shown
