"""Well-known provider tokens standing alone are redacted; names that only look alike are not.

The pattern layer used to catch a credential only by what surrounds it (``password=``, a
credential key, ``Authorization: Bearer``). These tests plant tokens of each format in
workers/engine/toolsets/provider_tokens.py where nothing around them says "secret": alone,
in a sentence, after a bare ``Bearer``, quoted, at a line's start and end, in a clone URL,
in JSON-escaped text, in an object's values and keys. Then the near misses: too short,
the wrong alphabet, glued to a word (``mydisk-``), Kubernetes names, hashes, UUIDs,
digests, base64 of ordinary data, placeholders; and a hypothesis property over DNS-1123
names and ordinary label values.

Every token here is made up for these tests (seeded random bodies); none is real.
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
import string
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.engine.toolsets.backend import REDACTED
from workers.engine.toolsets.provider_tokens import TOKEN_FORMATS, TokenFormat
from workers.engine.toolsets.redaction import _HINTS_LIST, PATTERNS, SecretScrubber

BASE62 = string.ascii_letters + string.digits
URLSAFE = BASE62 + "_-"
HEX = "0123456789abcdef"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
UPPER_ALNUM = string.ascii_uppercase + string.digits


def body(length: int, alphabet: str = BASE62, seed: str = "") -> str:
    """A made-up random body; with both cases and a digit at the front when the alphabet
    has them, so a sample never depends on the luck of its draw."""
    rng = random.Random(f"{seed}/{length}/{alphabet}")
    drawn = "".join(rng.choice(alphabet) for _ in range(length))
    head = "".join(c for c in "Qx7" if c in alphabet)
    return (head + drawn)[:length]


# One or more samples per format, as each provider issues them.
TOKENS: dict[str, str] = {
    "github-ghp": "ghp_" + body(36, seed="ghp"),
    "github-gho": "gho_" + body(36, seed="gho"),
    "github-ghu": "ghu_" + body(36, seed="ghu"),
    "github-ghs": "ghs_" + body(36, seed="ghs"),
    "github-ghr": "ghr_" + body(36, seed="ghr"),
    "github-ghs-stateless": "ghs_"
    + body(40, URLSAFE.replace("-", ""), "s1")
    + "."
    + body(60, BASE62, "s2")
    + "."
    + body(43, BASE62, "s3"),
    "github-fine-grained": "github_pat_" + body(22, seed="fg1") + "_" + body(59, seed="fg2"),
    "gitlab-pat": "glpat-" + body(20, URLSAFE, "glpat"),
    "gitlab-pat-routable": "glpat-" + body(27, URLSAFE, "glr") + ".01." + body(9, HEX, "crc"),
    "gitlab-deploy": "gldt-" + body(20, URLSAFE, "gldt"),
    "gitlab-runner": "glrt-t1_" + body(27, URLSAFE, "glrt"),
    "slack-bot": "xoxb-123456789012-1234567890123-" + body(24, seed="xoxb"),
    "slack-user": "xoxp-1234567890-1234567890-1234567890-" + body(32, HEX, "xoxp"),
    "slack-legacy-workspace": "xoxs-1234567890-1234567890-1234567890-" + body(64, HEX, "xoxs"),
    "slack-rotating": "xoxe.xoxp-1-" + body(140, seed="xoxe"),
    "slack-refresh": "xoxe-1-" + body(140, seed="xoxr"),
    "slack-app": "xapp-1-A0123456789-1234567890123-" + body(64, HEX, "xapp"),
    "aws-akia": "AKIA" + body(16, UPPER_ALNUM, "akia"),
    "aws-asia": "ASIA" + body(16, UPPER_ALNUM, "asia"),
    "openai-legacy": "sk-" + body(20, seed="o1") + "T3BlbkFJ" + body(20, seed="o2"),
    "openai-project": "sk-proj-" + body(156, URLSAFE, "proj"),
    "openai-service-account": "sk-svcacct-" + body(156, URLSAFE, "svc"),
    "anthropic": "sk-ant-api03-" + body(93, URLSAFE, "ant") + "AA",
    "stripe-live": "sk_live_" + body(24, seed="sl"),
    "stripe-live-long": "sk_live_" + body(99, seed="sll"),
    "stripe-restricted": "rk_live_" + body(99, seed="rl"),
    "stripe-test": "sk_test_" + body(24, seed="st"),
    "stripe-restricted-test": "rk_test_" + body(24, seed="rt"),
    "google-api-key": "AIza" + body(35, URLSAFE, "aiza"),
    "npm": "npm_" + body(36, seed="npm"),
    "pypi": "pypi-AgEIcHlwaS5vcmc" + body(160, URLSAFE, "pypi"),
    "testpypi": "pypi-AgENdGVzdC5weXBpLm9yZw" + body(120, URLSAFE, "testpypi"),
    "huggingface": "hf_" + body(34, string.ascii_letters, "hf"),
    "sendgrid": "SG." + body(22, URLSAFE, "sg1") + "." + body(43, URLSAFE, "sg2"),
    "docker-hub": "dckr_pat_" + body(27, URLSAFE, "dckr"),
    "vault-service": "hvs." + body(95, URLSAFE, "hvs"),
    "vault-batch": "hvb." + body(130, URLSAFE, "hvb"),
    "age": "AGE-SECRET-KEY-1" + body(58, BECH32, "age"),
}

# Places where nothing around the token says it is a credential (no credential key).
CONTEXTS: dict[str, str] = {
    "alone": "{}",
    "sentence": "2025-01-01T00:00:03Z cloning with {} into /src, then building",
    "after-bearer": "upstream sent header Bearer {} to the proxy",
    "single-quoted": "using '{}' for the mirror",
    "double-quoted": 'using "{}" for the mirror',
    "json-value": '{{"value": "{}", "kind": "note"}}',
    "line-start": "{} was used\nnext line",
    "line-end": "first line\nthen used {}",
    "clone-url": "git clone https://{}@github.com/shop/app.git",
    "after-equals": "GIT_ASKPASS_ANSWER={} git fetch",
    "json-escaped-newline": '{{"msg": "line one\\n{}\\nline two"}}',
    "parenthesised": "(token was {}).",
}


def _kept_parts(context: str) -> list[str]:
    return [part for part in context.split("{}") if part.strip()]


@pytest.mark.parametrize("name", TOKENS)
@pytest.mark.parametrize("where", CONTEXTS)
def test_each_format_is_redacted_wherever_it_stands(name: str, where: str) -> None:
    token = TOKENS[name]
    context = CONTEXTS[where].replace("{{", "{").replace("}}", "}")
    text = context.replace("{}", token)
    scrubbed = PATTERNS.text(text)
    assert token not in scrubbed, scrubbed
    assert REDACTED in scrubbed
    for part in _kept_parts(context):  # what surrounds the token stays as it was
        assert part in scrubbed


@pytest.mark.parametrize("name", TOKENS)
def test_the_whole_token_goes_and_nothing_around_it(name: str) -> None:
    token = TOKENS[name]
    scrubbed = PATTERNS.text(f"before {token} after")
    assert scrubbed in (f"before {REDACTED} after", f"before xoxe.{REDACTED} after")


def test_every_format_has_a_sample_and_its_hints_reach_the_automaton() -> None:
    """A format without a sample here is untested; a hint missing from the automaton is
    never looked at."""
    matched: set[str] = set()
    for token in TOKENS.values():
        start = 5 if token.startswith("xoxe.") else 0
        for fmt in TOKEN_FORMATS:
            if fmt.span(token, start) is not None:
                matched.add(fmt.provider)
    assert matched == {fmt.provider for fmt in TOKEN_FORMATS}
    for fmt in TOKEN_FORMATS:
        for hint in fmt.hints:
            assert hint == hint.lower() and len(hint) >= 3 and hint in _HINTS_LIST


def test_tokens_in_an_object_are_redacted_in_values_lists_and_keys() -> None:
    """Objects go through the same search: an env literal under a plain name, an argument,
    an annotation, and a ConfigMap data key that is a token (rewritten like a value)."""
    github, aws, openai = TOKENS["github-ghp"], TOKENS["aws-akia"], TOKENS["openai-project"]
    pod = {
        "metadata": {"name": "web-0", "annotations": {"note": f"deployed with {openai}"}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "args": ["--repo", f"https://{github}@github.com/shop/app.git"],
                    "env": [{"name": "UPLOADER", "value": aws}],
                }
            ]
        },
        "data": {github: "cached clone credential", "mode": "fast"},
    }
    scrubbed = SecretScrubber().scrub_object(pod)
    container = scrubbed["spec"]["containers"][0]
    assert container["args"] == ["--repo", f"https://{REDACTED}@github.com/shop/app.git"]
    assert container["env"] == [{"name": "UPLOADER", "value": REDACTED}]
    assert scrubbed["metadata"]["annotations"] == {"note": f"deployed with {REDACTED}"}
    assert scrubbed["data"] == {REDACTED: "cached clone credential", "mode": "fast"}
    assert scrubbed["metadata"]["name"] == "web-0"


def test_a_known_value_holding_a_token_is_searched_for_as_a_token_too() -> None:
    """A Secret value such as ``GH_TOKEN=ghp_...`` (a .env file) yields the token itself as a
    form to hunt, like the password of a DSN."""
    token = TOKENS["github-ghp"]
    scrubber = SecretScrubber([f"GIT_CLONE_WITH {token}"])
    assert scrubber.text(f"seen {token}") == f"seen {REDACTED}"


# --------------------------------------------------------------------------- near misses


def _shortened(token: str, by: int = 1) -> str:
    return token[:-by]


NEAR_MISSES: dict[str, str] = {
    # one character short of the documented (minimum) length
    "github-35": _shortened(TOKENS["github-ghp"]),
    "github-fine-grained-81": "github_pat_" + body(22, seed="fg1") + "_" + body(58, seed="fg2"),
    "gitlab-19": "glpat-" + body(19, URLSAFE, "glpat"),
    "slack-15": "xoxb-123456789012-" + body(15, seed="xoxb"),
    "aws-15": "AKIA" + body(15, UPPER_ALNUM, "akia"),
    "openai-31": "sk-" + body(31, seed="o31"),
    "stripe-23": "sk_live_" + body(23, seed="sl"),
    "google-34": "AIza" + body(34, URLSAFE, "aiza"),
    "npm-35": "npm_" + body(35, seed="npm"),
    "pypi-49": "pypi-AgEIcHlwaS5vcmc" + body(49, URLSAFE, "pypi"),
    "huggingface-33": "hf_" + body(33, string.ascii_letters, "hf"),
    "sendgrid-21": "SG." + body(21, URLSAFE, "sg1") + "." + body(43, URLSAFE, "sg2"),
    "sendgrid-42": "SG." + body(22, URLSAFE, "sg1") + "." + body(42, URLSAFE, "sg2"),
    "docker-26": "dckr_pat_" + body(26, URLSAFE, "dckr"),
    "vault-23": "hvs." + body(23, URLSAFE, "hvs"),
    "age-57": "AGE-SECRET-KEY-1" + body(57, BECH32, "age"),
    # longer than an exact length: another word, not this token
    "aws-17": "AKIA" + body(17, UPPER_ALNUM, "akia17"),
    "google-36": "AIza" + body(36, URLSAFE, "aiza36"),
    "npm-37": "npm_" + body(37, seed="npm37"),
    # the wrong alphabet
    "aws-lower-case": "AKIA" + body(16, string.ascii_lowercase + string.digits, "al"),
    "aws-lower-case-prefix": "akia" + body(16, UPPER_ALNUM, "ap"),
    "github-one-case": "ghp_" + body(36, string.ascii_lowercase + string.digits, "gl"),
    "github-upper-case": "ghp_" + body(36, UPPER_ALNUM, "gu"),
    "github-placeholder": "ghp_" + "x" * 36,
    "github-bad-character": "ghp_" + body(20, seed="gb") + "!" + body(15, seed="gb2"),
    "openai-hex": "sk-" + body(32, HEX, "deepseek-like"),
    "openai-title-words": "sk-Release-Notes-For-Version-2-Of-The-Checkout-App",
    "openai-placeholder": "sk-no-key-configured",
    "stripe-publishable": "pk_live_" + body(24, seed="pk"),
    "stripe-upper-prefix": "SK_LIVE_" + body(24, seed="SK"),
    "slack-words": "xoxb-1-notifier-for-the-shop-team",
    "gitlab-lower-case": "glpat-" + body(24, string.ascii_lowercase + string.digits, "gll"),
    "vault-lower-case": "hvs.vault-agent-injector.vault.svc",
    "age-not-bech32": "AGE-SECRET-KEY-1" + "B" * 58,
    "sendgrid-lower-prefix": "sg." + body(22, URLSAFE, "sg1") + "." + body(43, URLSAFE, "sg2"),
    "huggingface-snake": "hf_hub_download_timeout_seconds_default",
    "npm-config": "npm_config_registry_https_registry_npmjs_org",
    "github-snake": "ghs_installation_token_refresh_interval_seconds",
    "env-names": "SK_LIVE_MODE=1 AKIA_ROTATION=off GHP_ENABLED=true HF_HOME=/cache",
}

# the same token glued to the end of a longer word: no boundary before the prefix
GLUED: dict[str, str] = {
    "letter-before-sk": "mydisk-" + TOKENS["openai-project"][3:],
    "letter-before-ghp": "x" + TOKENS["github-ghp"],
    "digit-before-akia": "1" + TOKENS["aws-akia"],
    "underscore-before-ghp": "foo_" + TOKENS["github-ghp"],
    "dash-before-glpat": "my-" + TOKENS["gitlab-pat"],
    "dash-before-sk": "x-" + TOKENS["openai-legacy"],
    "word-before-sg": "msg." + TOKENS["sendgrid"][3:],
    "word-before-hf": "pdhf_" + TOKENS["huggingface"][3:],
    "letter-before-aiza": "z" + TOKENS["google-api-key"],
    "task-before-sk": "task-" + TOKENS["openai-legacy"][3:],
}

KUBERNETES_LOOKING: dict[str, str] = {
    "node-condition": "DiskPressure False disk-pressure kubelet has no disk pressure",
    "task-runner-pod": "task-runner-7f9c2ba4e8-xk2lp   1/1   Running   0   5m",
    "gcp-zones": "topology.kubernetes.io/zone: asia-east1-a\nregion: asia-northeast1",
    "sk-named-deployment": "sk-prod-web-5d8f7c9b6-abcde",
    "hf-named-pod": "hf-inference-7d9f8c6b5-q2w3e",
    "npm-cache": "npm-cache-0.npm-cache.ci.svc.cluster.local",
    "sg-service": "sg.prod.svc.cluster.local",
    "xoxb-app": "xoxb-notifier-6c9f7d8b4-zz9xq",
    "ghs-cronjob": "ghs-sync-28765432-abcde",
    "akia-exporter": "akia-exporter-59d8c7b6f4-mnbvc",
    "vault-service": "vault.vault.svc:8200 hvs.vault.svc",
    "pypi-mirror": "pypi-mirror-0 pypi-age-check",
    "dckr-rotator": "dckr-pat-rotator-12345",
    "uid": f"uid: {uuid.UUID(int=0x5B1E0F7A2C3D4E5F8A9B0C1D2E3F4A5B)}",
    "git-sha": "app.kubernetes.io/version: " + hashlib.sha1(b"assay").hexdigest(),
    "image-digest": "image: ghcr.io/shop/app@sha256:" + hashlib.sha256(b"assay").hexdigest(),
    "image-digest-alone": "sha256:" + hashlib.sha256(b"assay image").hexdigest(),
    "pod-template-hash": "pod-template-hash: 7f9c2ba4e8",
    "helm-release": "helm.sh/chart: ingress-nginx-4.10.1\nmeta.helm.sh/release-name: sk-ingress",
    "base64-of-yaml": base64.b64encode(b"apiVersion: v1\nkind: ConfigMap\n" * 4).decode(),
    "base64-of-labels": base64.b64encode(b'{"app":"web","tier":"frontend"}').decode(),
    "certificate-line": "MIIDBTCCAe2gAwIBAgIIAKIA2Z0xAkzIwDQYJKoZIhvcNAQELBQAwFTETMBEGA1UEAxMK",
}


@pytest.mark.parametrize(
    "text",
    [*NEAR_MISSES.values(), *GLUED.values(), *KUBERNETES_LOOKING.values()],
    ids=[*NEAR_MISSES, *GLUED, *KUBERNETES_LOOKING],
)
def test_near_misses_are_left_alone(text: str) -> None:
    for shown in (text, f"seen {text} here", f"'{text}'"):
        assert PATTERNS.text(shown) == shown


def test_an_escape_letter_glued_to_a_token_only_counts_after_a_backslash() -> None:
    """``\\n`` before a token is a line break in JSON-escaped text; a bare ``n`` is a word."""
    token = TOKENS["github-ghp"]
    assert PATTERNS.text(f"see\\n{token}") == f"see\\n{REDACTED}"
    assert PATTERNS.text(f"seen{token}") == f"seen{token}"


# --------------------------------------------------------------------------- properties

# Words found in names, including the lower-case stems of every token prefix, so the
# property also tries names that start like tokens (sk-..., ghs-..., asia-..., xoxb-...).
_STEMS = sorted({re.sub(r"[^a-z0-9]+", "-", h).strip("-") for f in TOKEN_FORMATS for h in f.hints})
_NAME_WORDS = st.sampled_from(
    [
        *_STEMS,
        *("sk", "gh", "ghp", "ghs", "github", "pat", "proj", "ant", "api03", "live", "test"),
        *("disk", "task", "web", "api", "prod", "eu", "east1", "worker", "redis", "canary"),
        *("secret", "token", "key", "ingress", "nginx", "kube", "system", "coredns", "v1"),
    ]
)
_POD_HASH = st.text(alphabet="bcdfghjklmnpqrstvwxz2456789", min_size=5, max_size=10)
_HEXISH = st.text(alphabet=HEX, min_size=4, max_size=10)
_NUMBER = st.integers(min_value=0, max_value=99_999_999).map(str)
_SEGMENT = st.one_of(_NAME_WORDS, _POD_HASH, _HEXISH, _NUMBER)
_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

dns_labels = st.one_of(
    st.lists(_SEGMENT, min_size=1, max_size=8).map("-".join),
    st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z"),
).filter(lambda label: len(label) <= 63 and _DNS_LABEL_RE.fullmatch(label) is not None)
dns_subdomains = (
    st.lists(dns_labels, min_size=1, max_size=4).map(".".join).filter(lambda n: len(n) <= 253)
)

_LABEL_WORDS = st.sampled_from(
    [
        *("true", "false", "web", "frontend", "backend", "prod", "staging", "Helm", "v1", "v2"),
        *("Production", "Deployment", "beta", "rc", "amd64", "linux", "EU", "PROD", "Cluster"),
        *("nginx", "ingress", "kube-prometheus-stack", "cert-manager", "argocd", "Running"),
    ]
)
_LABEL_SEGMENT = st.one_of(_LABEL_WORDS, _POD_HASH, _NUMBER, _HEXISH)
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
label_values = st.one_of(
    st.lists(_LABEL_SEGMENT, min_size=1, max_size=6).flatmap(
        lambda parts: st.sampled_from(["-", "_", "."]).map(lambda sep: sep.join(parts))
    ),
    st.builds(lambda: hashlib.sha1(b"x").hexdigest()),  # a git SHA as a version label
    st.integers(min_value=0, max_value=2**64).map(
        lambda n: hashlib.sha256(str(n).encode()).hexdigest()[:63]
    ),
).filter(lambda value: len(value) <= 63 and _LABEL_VALUE_RE.fullmatch(value) is not None)


@settings(max_examples=400, deadline=None)
@given(name=dns_subdomains, label=dns_labels, value=label_values)
def test_dns_names_and_ordinary_label_values_are_never_redacted(
    name: str, label: str, value: str
) -> None:
    text = (
        f"NAME   READY   STATUS\n{label}   1/1   Running\n"
        f"host: {name}\nlabels: app={label},version={value}\n{name} {value}"
    )
    assert PATTERNS.text(text) == text
    obj = {"metadata": {"name": label, "namespace": label, "labels": {"app": value}}, "host": name}
    assert SecretScrubber().scrub_object(obj) == {
        "metadata": {"name": label, "namespace": label, "labels": {"app": value}},
        "host": name,
    }


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(TOKENS)),
    before=st.sampled_from([" ", "\n", "=", ":", "'", '"', "(", "/", "@", ",", "\t", "[", "\\n"]),
    after=st.sampled_from(["", " ", "\n", "'", '"', ")", ",", ";", "@", "/", "\\n", ". Next"]),
)
def test_a_token_is_found_whatever_punctuation_surrounds_it(
    name: str, before: str, after: str
) -> None:
    token = TOKENS[name]
    scrubbed = PATTERNS.text(f"x{before}{token}{after}")
    assert token not in scrubbed and REDACTED in scrubbed


def test_token_formats_are_tried_only_at_their_hints() -> None:
    """Each format's pattern is anchored at a hint: the same text one character off is no
    token (no regex ever scans the text on its own)."""
    token = TOKENS["github-ghp"]
    fmt: TokenFormat = next(f for f in TOKEN_FORMATS if f.provider == "GitHub token")
    assert fmt.span(f" {token}", 1) == (1, 1 + len(token))
    assert fmt.span(f" {token}", 0) is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "sample",
    [
        TOKENS["github-ghp"],
        TOKENS["github-ghs-stateless"],
        NEAR_MISSES["github-one-case"],
        TOKENS["gitlab-pat-routable"],
        TOKENS["sendgrid"],
        TOKENS["vault-service"],
        TOKENS["slack-rotating"],
    ],
    ids=["github", "github-stateless", "github-one-case", "gitlab", "sendgrid", "vault", "slack"],
)
def test_a_long_chain_of_tokens_joined_by_dots_is_scrubbed_in_linear_time(sample: str) -> None:
    """A dot before a prefix is a boundary, and some bodies hold dots: were a body allowed
    any number of dot-separated segments, each token of a 400 KB chain would read the rest
    of it (seconds; hours for a large log)."""
    text = ".".join([sample] * (400_000 // (len(sample) + 1)))
    started = time.perf_counter()
    PATTERNS.text(text)
    assert time.perf_counter() - started < 1.0
