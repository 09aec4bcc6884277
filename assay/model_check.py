"""Refuse, at the front door, a model name no worker could send anywhere.

`assay check` and `assay query` refuse (64) a model litellm cannot route
(``workers.engine.llm.unroutable_model``). A model given to `submit`, `batch`, `schedule
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

Keys: a model whose provider wants an API key (``workers.engine.provider_keys``) is
refused when no live worker holds one for it and would send it to that provider (a worker
with an endpoint of its own may need none): each worker announces the providers it has a
key for (``assay.worker_presence``). Run, such a model failed on the worker with the
provider's "missing credentials" (a 500, retried) and ended 3 seconds later. With no
live worker, or one that does not say, the keys are unknown and nothing is refused.

Cost: most names are answered without importing litellm (``workers.engine.model_names``,
including a typo's shape at a private endpoint such as the local scripted model's); the
others import it once per process (about 3 s on a busy two-core host).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from workers.engine.model_names import routes_for_certain

if TYPE_CHECKING:
    from assay.worker_presence import FleetModels
    from schemas.settings import AssaySettings


@dataclass(frozen=True)
class ModelRefusal:
    """Why a model is refused at a fleet door: ``unroutable`` (no worker could route the
    name) or ``no_key`` (no live worker holds a key for its provider); one sentence."""

    kind: Literal["unroutable", "no_key"]
    message: str

    @property
    def code(self) -> Literal["unroutable_model", "model_key_missing"]:
        """The API's error code for it (docs/api.md: 404 and 409)."""
        return "unroutable_model" if self.kind == "unroutable" else "model_key_missing"


def fleet_model_problem(
    model: str | None, api_base: str | None, *, redis: Any, settings: AssaySettings
) -> str | None:
    """Why no worker could run ``model``, as one sentence; None if one can (or no model)."""
    refusal = fleet_model_refusal(model, api_base, redis=redis, settings=settings)
    return None if refusal is None else refusal.message


def fleet_model_refusal(
    model: str | None, api_base: str | None, *, redis: Any, settings: AssaySettings
) -> ModelRefusal | None:
    """:func:`fleet_model_problem` with its kind (the API words each its own way).

    ``model`` None or empty means the workers' own ``ASSAY_MODEL``: theirs to check.
    """
    if not model:
        return None
    from assay.worker_presence import read_fleet_models

    fleet = None if api_base else read_fleet_models(redis, settings.key_prefix)
    if not routes_for_certain(model):
        problem = _route_problem(model, api_base, fleet, settings)
        if problem is not None:
            return ModelRefusal("unroutable", problem)
    problem = None if fleet is None else _key_problem(model, fleet)
    return None if problem is None else ModelRefusal("no_key", problem)


def _route_problem(
    model: str, api_base: str | None, fleet: FleetModels | None, settings: AssaySettings
) -> str | None:
    from workers.engine.llm import unroutable_model  # imports litellm: only for unusual names

    if fleet is None:
        endpoints: set[str | None] = {api_base}
    elif not fleet.workers:
        endpoints = {settings.api_base}
    elif not fleet.endpoints_known:
        return None
    else:
        endpoints = set(fleet.endpoints)
    problems = [unroutable_model(model, endpoint) for endpoint in sorted(endpoints, key=str)]
    if any(problem is None for problem in problems):
        return None
    return problems[0]


def _key_problem(model: str, fleet: FleetModels) -> str | None:
    """One sentence when every live worker would send ``model`` to a provider it has no key
    for; None when one could send it, or when that is not known (no live worker, one
    that does not say)."""
    from workers.engine.provider_keys import unkeyed_provider

    if not fleet.workers or not fleet.endpoints_known:
        return None
    missing = []
    for worker in fleet.reach:
        if worker.keys is None:
            return None
        found = unkeyed_provider(model, worker.api_base, worker.keys)
        if found is None:
            return None
        missing.append(found)
    if not missing:
        return None
    provider, variables = missing[0]
    return (
        f"the model {model!r} ({provider}) needs an API key and none of the fleet's "
        f"{fleet.workers} live worker(s) has one: restart them with ASSAY_API_KEY or "
        f"{' or '.join(variables)} set, or name a model they have a key for"
    )


API_REASON = (
    "litellm cannot tell which provider serves the model {model!r}: name it "
    "provider/model (e.g. openai/gpt-4o-mini, or openai/NAME for the fleet's "
    "OpenAI-compatible endpoint)"
)
"""The API's wording: the CLI's names flags, and the fleet's endpoint is not the caller's."""
