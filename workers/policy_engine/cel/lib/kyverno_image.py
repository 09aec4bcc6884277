"""Kyverno's ``image`` library: container image references parsed, for a Kyverno
ValidatingPolicy.

``parseImageReference(s)`` (and its older name ``image(s)``) parses a reference as Kyverno
does (go-containerregistry's lenient parsing) into a ``kyverno.image`` value; a text that is
no reference is an evaluation error. ``isImage(s)`` says whether it parses. Of a value:

* ``registry()``: the registry, ``index.docker.io`` when none is written (``docker.io`` is
  the same); the first path part is a registry only when it holds a ``.`` or a ``:``;
* ``repository()``: the path in the registry, with ``library/`` before a one-part Docker
  Hub name (``nginx`` is ``library/nginx``);
* ``tag()``: the tag (``latest`` when neither tag nor digest is written), ``''`` for a
  reference by digest; ``digest()``: the ``sha256:`` digest, ``''`` for a tag;
  ``identifier()``: the tag or the digest; ``containsDigest()``: it is a reference by digest.

A reference with both (``nginx:1.25@sha256:...``) is a reference by digest: its tag is
dropped. Two values are equal when written the same (Kyverno compares the text as written
too): ``image('nginx') != image('docker.io/library/nginx:latest')``. Names: a
repository of lower-case letters, digits and ``_-./`` (2 to 255), a tag of letters, digits
and ``_-.`` (1 to 128), a digest ``sha256:`` and 64 hex digits.

The functions answer only while an imported Kyverno ValidatingPolicy is run
(kyverno_resource.py binds that); each is charged by its argument's length.
"""

from __future__ import annotations

import string
from typing import Any

from workers.policy_engine.cel.lib.base import CelLibraryError, Overload, opaque, unwrap
from workers.policy_engine.cel.lib.kyverno_resource import require_kyverno_policy

DEFAULT_REGISTRY = "index.docker.io"
DEFAULT_TAG = "latest"
_REPOSITORY_CHARS = frozenset(string.ascii_lowercase + string.digits + "_-./")
_TAG_CHARS = frozenset(string.ascii_letters + string.digits + "_-.")
_DIGEST_CHARS = frozenset("sh:0123456789abcdef")
# What a URI authority (RFC 3986, as Go's URL parser takes a host) may hold in ASCII.
_REGISTRY_CHARS = frozenset(string.ascii_letters + string.digits + "-._~!$&'()*+,;=:[]<>\"")


def _check(what: str, text: str, allowed: frozenset[str], shortest: int, longest: int) -> None:
    if not shortest <= len(text) <= longest:
        raise CelLibraryError(f"a {what} must be {shortest} to {longest} characters: {text!r}")
    if any(char not in allowed for char in text):
        raise CelLibraryError(f"a {what} holds a character it may not: {text!r}")


def _check_registry(registry: str) -> None:
    """As Go's URL parser takes ``//registry``: authority characters, a numeric port."""
    if any(ord(char) < 0x80 and char not in _REGISTRY_CHARS for char in registry):
        raise CelLibraryError(f"a registry must be a URI authority: {registry!r}")
    if registry.startswith("["):
        _, bracket, port = registry.partition("]")
        if not bracket or not (port == "" or (port[:1] == ":" and port[1:].isdigit())):
            raise CelLibraryError(f"a registry must be a URI authority: {registry!r}")
        return
    _, colon, port = registry.rpartition(":")
    if colon and port and not port.isdigit():
        raise CelLibraryError(f"a registry's port must be a number: {registry!r}")


def _repository(name: str) -> tuple[str, str]:
    """(registry, repository) of a name without tag or digest."""
    if not name:
        raise CelLibraryError("an image reference must name a repository")
    registry, repository = "", name
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first):
        registry, repository = first, rest
    _check("repository", repository, _REPOSITORY_CHARS, 2, 255)
    if registry == "docker.io":
        registry = DEFAULT_REGISTRY
    if registry:
        _check_registry(registry)
    registry = registry or DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in repository:
        repository = f"library/{repository}"
    return registry, repository


def _by_tag(text: str) -> dict[str, str]:
    base, tag = text, ""
    head, colon, last = text.rpartition(":")
    if colon and "/" not in last:
        base, tag = head, last
    if tag:
        _check("tag", tag, _TAG_CHARS, 1, 128)
    registry, repository = _repository(base)
    return {"registry": registry, "repository": repository, "tag": tag or DEFAULT_TAG,
            "digest": ""}  # fmt: skip


def _by_digest(text: str) -> dict[str, str]:
    parts = text.split("@")
    if len(parts) != 2:
        raise CelLibraryError(f"an image reference holds no tag or digest it may: {text!r}")
    base, digest = parts
    _check("digest", digest, _DIGEST_CHARS, 71, 71)
    try:
        tagged = _by_tag(base)
        registry, repository = tagged["registry"], tagged["repository"]
    except CelLibraryError:
        registry, repository = _repository(base)
    return {"registry": registry, "repository": repository, "tag": "", "digest": digest}


def parse(text: str) -> dict[str, str]:
    """The parts of an image reference; CelLibraryError for a text that is none."""
    try:
        return _by_tag(text)
    except CelLibraryError:
        try:
            return _by_digest(text)
        except CelLibraryError:
            raise CelLibraryError(f"{text[:200]!r} is no image reference") from None


def parse_reference(text: str) -> Any:
    require_kyverno_policy("parseImageReference")
    # Kyverno compares two references field by field, the text as written among them: two
    # spellings of one image are not equal
    return opaque("image", original=text, **parse(text))


def is_image(text: str) -> bool:
    require_kyverno_policy("isImage")
    try:
        parse(text)
    except CelLibraryError:
        return False
    return True


def _part(name: str) -> Any:
    def read(value: Any) -> str:
        return str(unwrap(value, "image")[name])

    return read


def identifier(value: Any) -> str:
    found = unwrap(value, "image")
    return str(found["digest"] or found["tag"])


def contains_digest(value: Any) -> bool:
    return bool(unwrap(value, "image")["digest"])


OVERLOADS = [
    Overload("parseImageReference", "kyverno_parse_image_reference", ("string",), "image",
             parse_reference),
    Overload("image", "kyverno_string_to_image", ("string",), "image", parse_reference),
    Overload("isImage", "kyverno_is_image_string", ("string",), "bool", is_image),
    Overload("registry", "kyverno_image_registry", ("image",), "string", _part("registry"),
             member=True),
    Overload("repository", "kyverno_image_repository", ("image",), "string",
             _part("repository"), member=True),
    Overload("tag", "kyverno_image_tag", ("image",), "string", _part("tag"), member=True),
    Overload("digest", "kyverno_image_digest", ("image",), "string", _part("digest"),
             member=True),
    Overload("identifier", "kyverno_image_identifier", ("image",), "string", identifier,
             member=True),
    Overload("containsDigest", "kyverno_image_contains_digest", ("image",), "bool",
             contains_digest, member=True),
]  # fmt: skip
