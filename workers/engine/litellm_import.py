"""The one way litellm is imported: lazily, with the local price list, quiet, no own retries.

Its own module so both model paths (workers/engine/llm.py and the direct path in
workers/engine/openai_compat.py) can load it without importing each other. Lazy
because importing litellm (and the OpenAI SDK it brings) costs seconds, which `assay
--help`, a run on the direct path and a probe must not pay: only a call litellm serves,
or a question only it can answer, imports it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

_loaded: Any = None
_lock = threading.Lock()  # a worker's threads may all ask for it at once: one imports it


def loaded_litellm() -> Any:
    """litellm if this process has imported it already, else None (nothing is imported)."""
    return _loaded


def load_litellm() -> Any:
    """Import litellm the one safe way: local price list, quiet, no retries of its own.

    The set-up runs once per process: ``Logger.setLevel`` clears the cache of every logger
    in the process, and the engine asks for litellm several times per step (issue 15 found
    this at a tenth of a worker's CPU per evaluation).
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            _loaded = _import()
    return _loaded


def _import() -> Any:
    # Without this litellm downloads its price list at import (slow failure offline).
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm  # lazy on purpose: see the module docstring

    litellm.suppress_debug_info = True
    litellm.num_retries = 0
    # Counting a prompt near the budget (workers/engine/tokenizer_count.py) must not fetch a
    # Hugging Face tokenizer over the network (llama, some Cohere and Anthropic names):
    # tiktoken's bundled encoding counts them, and the count's margin covers the difference.
    litellm.disable_hf_tokenizer_download = True
    logging.getLogger("LiteLLM").setLevel(logging.WARNING)
    return litellm
