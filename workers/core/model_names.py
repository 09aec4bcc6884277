"""Model names litellm routes for certain, told without importing litellm.

Importing litellm costs about three seconds on a busy two-core host (more than `assay
submit` itself), and the front doors (`submit`, `batch`, `schedule add`, the API) ask
whether a model name routes before they queue or store it. Most names answer from here:

* ``provider/NAME`` with a provider in :data:`ROUTED_PREFIXES` (``openai/``,
  ``ollama/``, ``hosted_vllm/``, ...): litellm's ``get_llm_provider`` takes such a name
  by its prefix, whatever the rest and whatever the endpoint;
* a bare name litellm's bundled price list files under OpenAI or Anthropic
  (``gpt-4o-mini``): ``get_llm_provider`` looks those up in the same list
  (``LITELLM_LOCAL_MODEL_COST_MAP`` makes every assay process read the bundled copy).

This only ever says yes. Any other name goes to litellm itself
(``workers.core.llm.unroutable_model``), so a name is refused only when litellm refuses
it; an entry here that litellm stopped routing would let a typo through (as before the
check), never refuse a working model. tests/test_llm.py checks every entry against the
installed litellm.
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path

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


def routes_for_certain(model: str) -> bool:
    """True when litellm routes ``model`` at any endpoint; False means "ask litellm"."""
    prefix, slash, rest = model.partition("/")
    if slash:
        return prefix in ROUTED_PREFIXES and bool(rest.strip())
    return model in _bare_names()


@lru_cache(maxsize=1)
def _bare_names() -> frozenset[str]:
    """The bundled price list's OpenAI and Anthropic names, read as a file (about 50 ms)."""
    spec = importlib.util.find_spec("litellm")  # finds the package, does not import it
    folders = (spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        try:
            entries = json.loads((Path(folder) / PRICE_LIST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(entries, dict):
            return frozenset(
                name
                for name, entry in entries.items()
                if isinstance(entry, dict)
                and entry.get("litellm_provider") in BARE_NAME_PROVIDERS
                and not _openai_price_only(name)
            )
    return frozenset()


def _openai_price_only(name: str) -> bool:
    """``ft:gpt-4o:...``-style keys litellm keeps for prices only (not routed by name)."""
    return name.startswith("ft:") and name.count(":") <= 1
