"""Refuse, at the front door, a model name no worker could send anywhere.

`assay check` and `assay query` refuse (64) a model litellm cannot route
(``workers.core.llm.unroutable_model``). A model given to `submit`, `batch`, `schedule
add` / `update` or the HTTP API is called later, on a worker; unchecked, a typo is
queued or stored and every run of it ends ``cannot_determine`` (a schedule: forever).
This is the same check for those doors.

Which endpoint: whether litellm routes a name can depend on the endpoint (a bare name
at a known provider's URL, e.g. Groq's, routes to that provider), and a run that names
no ``api_base`` of its own is sent to its worker's. So the name is checked at the
request's own ``api_base``; else at each live worker's (``assay.worker_presence``),
refused only when no worker could route it; else, with no live worker, at this
process's ``ASSAY_API_BASE`` (the best guess of the fleet's setting). A live worker too
old to announce its endpoint means the answer is unknown, and nothing is refused.

Cost: most names are answered without importing litellm (``workers.core.model_names``);
the others import it once per process (about 3 s on a busy two-core host).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.core.model_names import routes_for_certain

if TYPE_CHECKING:
    from schemas.settings import AssaySettings


def fleet_model_problem(
    model: str | None, api_base: str | None, *, redis: Any, settings: AssaySettings
) -> str | None:
    """Why no worker could route ``model``, as one sentence; None if one can (or no model).

    ``model`` None or empty means the workers' own ``ASSAY_MODEL``: theirs to check.
    """
    if not model or routes_for_certain(model):
        return None
    from assay.worker_presence import read_fleet_models
    from workers.core.llm import unroutable_model  # imports litellm: only for unusual names

    if api_base:
        endpoints: set[str | None] = {api_base}
    else:
        fleet = read_fleet_models(redis, settings.key_prefix)
        if not fleet.workers:
            endpoints = {settings.api_base}
        elif not fleet.endpoints_known:
            return None
        else:
            endpoints = set(fleet.endpoints)
    problems = [unroutable_model(model, endpoint) for endpoint in sorted(endpoints, key=str)]
    if any(problem is None for problem in problems):
        return None
    return problems[0]


API_REASON = (
    "litellm cannot tell which provider serves the model {model!r}: name it "
    "provider/model (e.g. openai/gpt-4o-mini, or openai/NAME for the fleet's "
    "OpenAI-compatible endpoint)"
)
"""The API's wording: the CLI's names flags, and the fleet's endpoint is not the caller's."""
