"""Refuse, before a run starts, a model whose provider wants an API key that no one set.

Without a key the first model call fails with the provider's "missing credentials", which
litellm reports as a server error (500): retried as a transient fault until the run's time
ran out (23 s), then ``cannot_determine`` (3), and the reason named ``OPENAI_API_KEY`` while
assay's own setting is ``ASSAY_API_KEY``. So `assay check` and `query` ask first, in well
under a second, without importing litellm (seconds on a busy host):

* the run has a key (``ASSAY_API_KEY``) or its own endpoint (``--api-base``: a
  self-hosted server may want none): nothing to ask;
* the model's provider (its ``provider/`` prefix, or the bundled price list's for a bare
  name such as ``gpt-4o-mini``) is one of :data:`KEY_VARIABLES`, and none of that
  provider's variables is set: refused, naming ``ASSAY_API_KEY`` and the provider's.

Providers with other credentials (Azure, Bedrock, Vertex AI) or none (Ollama, vLLM) are
not asked here; the run reports what litellm says. tests/test_provider_keys.py checks each
entry against the installed litellm's ``validate_environment``.

The fleet's doors (`submit`, `batch`, `schedule`, `apply`, the API) ask the same question
of the workers, which hold the keys: each worker announces :func:`held_keys` (the
providers it has a key for, never a key), and ``assay.model_check`` refuses a run no live
worker could send (:func:`unkeyed_provider`).
"""

from __future__ import annotations

from schemas.settings import AssaySettings, environment_has
from workers.engine.model_names import bare_name_provider

KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "deepinfra": ("DEEPINFRA_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "huggingface": ("HUGGINGFACE_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "nvidia_nim": ("NVIDIA_NIM_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "perplexity": ("PERPLEXITYAI_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",),
    "xai": ("XAI_API_KEY",),
}
"""Providers that take one API key, and the variables litellm reads it from (any one)."""


def provider_of(model: str) -> str | None:
    """The litellm provider of ``model`` as far as it is told without litellm, else None."""
    prefix, slash, rest = model.partition("/")
    if slash:
        return prefix if rest.strip() else None
    return bare_name_provider(model)


ANY_PROVIDER = "*"
"""In :func:`held_keys`: ``ASSAY_API_KEY`` is set, which is sent to whichever provider."""


def held_keys(settings: AssaySettings) -> frozenset[str]:
    """The providers this process has a key for: :data:`ANY_PROVIDER` with ``ASSAY_API_KEY``,
    else each of :data:`KEY_VARIABLES` one of whose variables is set."""
    if settings.api_key is not None:
        return frozenset({ANY_PROVIDER})
    return frozenset(
        provider
        for provider, variables in KEY_VARIABLES.items()
        if any(environment_has(name) for name in variables)
    )


def unkeyed_provider(
    model: str, api_base: str | None, keys: frozenset[str]
) -> tuple[str, tuple[str, ...]] | None:
    """(provider, its key variables) when ``model`` goes to a provider that wants a key and
    ``keys`` (:func:`held_keys`) holds none for it; None when a run of it could be sent
    (an endpoint of its own may want no key)."""
    if api_base or ANY_PROVIDER in keys:
        return None
    provider = provider_of(model)
    variables = KEY_VARIABLES.get(provider or "")
    if provider is None or not variables or provider in keys:
        return None
    return provider, variables


def missing_key(model: str, settings: AssaySettings) -> str | None:
    """One sentence naming the variables to set when ``model`` has no key; else None."""
    found = unkeyed_provider(model, settings.api_base, held_keys(settings))
    if found is None:
        return None
    provider, variables = found
    theirs = " or ".join(variables)
    return (
        f"the model {model!r} ({provider}) needs an API key and none is set: set "
        f"ASSAY_API_KEY, or {theirs}, which litellm reads"
    )
