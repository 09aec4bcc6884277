"""What litellm would say of a model name, told without importing litellm where that is certain.

Importing litellm costs about three seconds on a busy two-core host (more than `assay
submit` itself). The front doors (`submit`, `batch`, `schedule add`, the API) ask
whether a model name routes before they queue or store it, and every run asks litellm's
catalogue for the model's price and whether it calls tools. Most names answer from here.

Routes for certain (:func:`routes_for_certain`):

* ``provider/NAME`` with a provider in :data:`ROUTED_PREFIXES` (``openai/``,
  ``ollama/``, ``hosted_vllm/``, ...): litellm's ``get_llm_provider`` takes such a name
  by its prefix, whatever the rest and whatever the endpoint;
* a bare name litellm's bundled price list files under OpenAI or Anthropic
  (``gpt-4o-mini``): ``get_llm_provider`` looks those up in the same list
  (``LITELLM_LOCAL_MODEL_COST_MAP`` makes every assay process read the bundled copy).

Has nothing in litellm's catalogue (:func:`catalogue_may_know` False): no name litellm's
``get_model_info`` looks up (the name, the name after its provider prefix, its last part)
is a key of the bundled price list, in any case, and no rule of the list's
``fallback_generalizations`` matches one; litellm then raises ``ModelNotMappedError``, so
the model has no price and the default transport (``openai/scripted``, most self-hosted
names).

Both only ever spare litellm a question it would answer the same way. Any other name goes
to litellm itself (``workers.engine.llm.unroutable_model``, ``LiteLLMClient._model_info``),
so a name is refused only when litellm refuses it; an entry here that litellm stopped
routing would let a typo through (as before the check), never refuse a working model.
tests/engine/test_llm.py checks both against the installed litellm.

:func:`routes_for_certain` only ever says yes. :func:`refused_for_certain` says no for
one narrow shape of name, the typo a person makes (``nonsense-model``, ``gpt4o-mini``
without a ``provider/``), so the refusal comes in well under a second: a bare name (no
``/``, no ``:``) asked with no endpoint or a private one (:func:`private_endpoint`: an IP
address, ``localhost``, a one-label or ``.local``/``.internal``/``.svc`` host, such as the
local scripted model's or a cluster's vLLM), which neither the price list nor litellm's own
short list of other bare names (:data:`UNPRICED_BARE_NAMES`) holds and which none of the
name patterns litellm's ``get_llm_provider`` matches by substring contains. An endpoint
changes litellm's answer for a bare name only when it is one of the providers' public
hosts it knows (``litellm.openai_compatible_endpoints``, e.g. Groq's), never a private one.
Any other name goes to litellm itself (``workers.engine.llm.unroutable_model``).
tests/engine/test_llm.py checks both against the installed litellm: every yes is litellm's yes,
every name litellm knows is not refused here, generated names refused here (at no endpoint
and at private ones) are refused by litellm too, and no endpoint litellm knows is private.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

ROUTED_PREFIXES = frozenset(
    {
        "anthropic",
        "azure",
        "azure_ai",
        "bedrock",
        "cerebras",
        "cohere",
        "cohere_chat",
        "custom_openai",
        "databricks",
        "deepinfra",
        "deepseek",
        "fireworks_ai",
        "gemini",
        "groq",
        "hosted_vllm",
        "huggingface",
        "litellm_proxy",
        "llamafile",
        "lm_studio",
        "mistral",
        "nvidia_nim",
        "ollama",
        "ollama_chat",
        "openai",
        "openrouter",
        "perplexity",
        "sambanova",
        "text-completion-openai",
        "together_ai",
        "vertex_ai",
        "vllm",
        "watsonx",
        "xai",
    }
)
"""Provider prefixes that route any ``PREFIX/NAME`` (a non-empty NAME)."""

BARE_NAME_PROVIDERS = frozenset({"openai", "anthropic"})
"""Price-list providers whose bare model names ``get_llm_provider`` knows by name."""

PRICE_LIST = "model_prices_and_context_window_backup.json"

UNPRICED_BARE_NAMES = frozenset({"31dxrj3", "llama2", "maritalk", "q841o8w", "qvv0xeq"})
"""Bare names litellm lists (``litellm.model_list_set``) that its price list does not hold."""

MATCHED_BY_PATTERN = ("claude", "gpt-image", "amazon_nova")
"""Parts of a name ``get_llm_provider`` routes by substring or prefix; such names go to it."""

PROXY_VARIABLE = "USE_LITELLM_PROXY"  # set, litellm routes every name to its proxy


def routes_for_certain(model: str) -> bool:
    """True when litellm routes ``model`` at any endpoint; False means "ask litellm"."""
    prefix, slash, rest = model.partition("/")
    if slash:
        return prefix in ROUTED_PREFIXES and bool(rest.strip())
    return model in _bare_names()


PRIVATE_HOST_SUFFIXES = (".localhost", ".local", ".internal", ".svc")
"""Host name endings no public provider endpoint litellm knows has (one-label names neither)."""


def private_endpoint(api_base: str) -> bool:
    """Whether ``api_base``'s host is one no provider endpoint litellm knows can have: an IP
    address, ``localhost``, a one-label name, or one under :data:`PRIVATE_HOST_SUFFIXES`."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(api_base if "://" in api_base else f"//{api_base}").hostname or ""
    except ValueError:
        return False
    host = host.lower().rstrip(".")
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host or host.endswith(PRIVATE_HOST_SUFFIXES)
    return True


def refused_for_certain(model: str, api_base: str | None) -> bool:
    """True when litellm cannot route ``model`` (the shape above); False means "ask litellm"."""
    from schemas.settings import environment_has

    name = model.strip()
    if api_base and not private_endpoint(api_base):
        return False
    if not name or "/" in name or ":" in name or name == "*":
        return False
    if any(part in name.lower() for part in MATCHED_BY_PATTERN):
        return False
    if name in UNPRICED_BARE_NAMES or name in _all_priced_names():
        return False
    return not environment_has(PROXY_VARIABLE)


@lru_cache(maxsize=1)
def _all_priced_names() -> frozenset[str]:
    """Every name of the bundled price list, any provider."""
    entries = _price_list()
    return frozenset(entries) if entries else frozenset()


def bare_name_provider(model: str) -> str | None:
    """The provider (``openai``, ``anthropic``) of a bare name litellm knows by name."""
    return _bare_names().get(model)


@lru_cache(maxsize=1)
def _price_list() -> dict[str, object] | None:
    """litellm's bundled price list, parsed (about 50 ms); None when not found."""
    text = _price_list_text()
    if text is None:
        return None
    try:
        entries = json.loads(text)
    except ValueError:
        return None
    return entries if isinstance(entries, dict) else None


@lru_cache(maxsize=256)
def catalogue_may_know(model: str) -> bool:
    """False when litellm's bundled price list certainly holds nothing on ``model`` (a search
    of its 3 MB, about 10 ms: once per model and process)."""
    catalogue = _catalogue()
    if catalogue is None:
        return True
    text, rules = catalogue
    candidates = {model, model.partition("/")[2], model.rpartition("/")[2]} - {""}
    if any(not _PLAIN_NAME.fullmatch(name) for name in candidates):
        return True  # a name JSON would escape: let litellm look
    for name in candidates:
        if f'"{name.lower()}"' in text or any(rule.search(name) for rule in rules):
            return True
    return False


_PLAIN_NAME = re.compile(r"[A-Za-z0-9._:@+/ -]+")


@lru_cache(maxsize=1)
def _catalogue() -> tuple[str, tuple[re.Pattern[str], ...]] | None:
    """The price list's text in lower case (its keys are looked up in any case) and its
    capability rules' patterns; None when it cannot be read (then litellm is asked)."""
    text = _price_list_text()
    if text is None:
        return None
    rules: list[re.Pattern[str]] = []
    start = text.find('"fallback_generalizations"')
    if start >= 0:
        try:
            block, _ = json.JSONDecoder().raw_decode(text, text.index("{", start))
            for rule in block.get("rules", []):
                info = rule.get("model_info") or {}
                if set(info) - {"litellm_provider"}:  # a routing-only rule gives no model info
                    rules.append(re.compile(rule["pattern"], re.IGNORECASE))
        except (ValueError, KeyError, TypeError, AttributeError, re.error):
            return None
    return text.lower(), tuple(rules)


def _price_list_text() -> str | None:
    """The bundled price list, read as a file (litellm is not imported; about 3 MB, kept by
    the two readers above only as what they need)."""
    spec = importlib.util.find_spec("litellm")  # finds the package, does not import it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            return (Path(folder) / PRICE_LIST).read_text(encoding="utf-8")
        except OSError:
            continue
    return None


@lru_cache(maxsize=1)
def _bare_names() -> Mapping[str, str]:
    """The bundled price list's OpenAI and Anthropic names, each with its provider."""
    entries = _price_list() or {}
    return MappingProxyType(
        {
            name: str(entry["litellm_provider"])
            for name, entry in entries.items()
            if isinstance(entry, dict)
            and entry.get("litellm_provider") in BARE_NAME_PROVIDERS
            and not _openai_price_only(name)
        }
    )


def _openai_price_only(name: str) -> bool:
    """``ft:gpt-4o:...``-style keys litellm keeps for prices only (not routed by name)."""
    return name.startswith("ft:") and name.count(":") <= 1
