"""Kyverno's image library (``parseImageReference`` / ``image``, ``isImage`` and the parts of
a reference), against Kyverno's documented results: go-containerregistry's lenient parsing,
Docker Hub as the default registry with ``library/`` for one-part names, ``latest`` as the
default tag; only inside a Kyverno ValidatingPolicy."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.kyverno_support import in_kyverno_policy
from tests.policy_engine.cel.lib.support import fails, holds, value

DIGEST = "sha256:" + "0123456789abcdef" * 4

PARTS = [
    # reference, registry, repository, tag, digest
    ("nginx", "index.docker.io", "library/nginx", "latest", ""),
    ("nginx:1.25", "index.docker.io", "library/nginx", "1.25", ""),
    ("docker.io/bitnami/redis:7", "index.docker.io", "bitnami/redis", "7", ""),
    ("ghcr.io/org/app:v1.2.3", "ghcr.io", "org/app", "v1.2.3", ""),
    ("localhost:5000/app", "localhost:5000", "app", "latest", ""),
    ("localhost/app", "index.docker.io", "localhost/app", "latest", ""),  # no . or :
    ("registry.example.com:443/a/b/c:x_Y-1.0", "registry.example.com:443", "a/b/c", "x_Y-1.0",
     ""),
    (f"nginx@{DIGEST}", "index.docker.io", "library/nginx", "", DIGEST),
    (f"ghcr.io/org/app:1.0@{DIGEST}", "ghcr.io", "org/app", "", DIGEST),  # tag dropped
]  # fmt: skip
NOT_IMAGES = [
    "",
    "Nginx",  # upper case in the repository
    "a",  # a repository of one character
    "nginx:bad/tag:x!",
    "nginx:" + "t" * 129,  # a tag past 128 characters
    "nginx@sha256:abc",  # a digest must have 64 hex digits
    f"nginx@{DIGEST}@{DIGEST}",
    "registry.example.com:port/app",  # a port that is no number
    "my registry.io/app",
]


@pytest.mark.parametrize(("reference", "registry", "repository", "tag", "digest"), PARTS)
def test_parts_of_a_reference(
    reference: str, registry: str, repository: str, tag: str, digest: str
) -> None:
    data = {"object": {"image": reference}}
    with in_kyverno_policy():
        for function in ("parseImageReference", "image"):
            got = value(
                f"[{function}(object.image).registry(), {function}(object.image).repository(), "
                f"{function}(object.image).tag(), {function}(object.image).digest(), "
                f"{function}(object.image).identifier(), "
                f"{function}(object.image).containsDigest(), isImage(object.image)]",
                data,
            )
            assert got == [registry, repository, tag, digest, digest or tag, bool(digest), True]


@pytest.mark.parametrize("reference", NOT_IMAGES)
def test_what_is_no_reference_gives_no_value(reference: str) -> None:
    data = {"object": {"image": reference}}
    with in_kyverno_policy():
        assert value("isImage(object.image)", data) is False
        fails("parseImageReference(object.image).registry() != ''", data, "no image reference")


def test_a_reference_is_its_own_type() -> None:
    with in_kyverno_policy():
        holds("type(parseImageReference('nginx')) == type(image('redis'))")
        holds("type(parseImageReference('nginx')) != string")
        holds("parseImageReference('nginx:1') == image('nginx:1')")
        # Kyverno compares the text as written too: two spellings of one image differ
        holds("parseImageReference('nginx') != parseImageReference('docker.io/nginx:latest')")
        fails("'ghcr.io/a:1'.registry() == 'ghcr.io'", match="(?i)no matching overload")


def test_kyverno_s_conformance_policy_reads_registry_and_digest() -> None:
    """Modelled on Kyverno's conformance test of parseImageReference: images from ghcr.io,
    tagged and not pinned by digest."""
    rule = (
        "object.containers.map(c, parseImageReference(c.image))"
        ".all(i, i.registry() == 'ghcr.io' && !i.containsDigest())"
    )

    def judged(*images: str) -> object:
        return value(rule, {"object": {"containers": [{"image": i} for i in images]}})

    with in_kyverno_policy():
        assert judged("ghcr.io/kyverno/kyverno:v1.14") is True
        assert judged("ghcr.io/kyverno/kyverno:v1.14", "nginx") is False
        assert judged(f"ghcr.io/kyverno/kyverno@{DIGEST}") is False


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails("parseImageReference('nginx').registry() != ''", match="Kyverno's library")
    fails("isImage('nginx')", match="Kyverno's library")
