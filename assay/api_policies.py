"""The ``/v1/policies`` routes: import admission policies as checks, as ``assay probe import``.

``POST /v1/policies/import`` takes the files' text (YAML or JSON documents) and an optional
set name, and answers what was imported and what was refused, with the reason (a dry run
stores nothing). ``GET /v1/policies`` lists the imported policies and the sets;
``GET /v1/policies/{name}`` one policy; ``GET .../export?format=vap|kyverno`` its admission
policy as YAML; ``DELETE`` forgets it (``DELETE /v1/policy-sets/{name}`` a set). An imported
policy runs as the check ``policy:NAME`` (a set as ``policy-set:NAME``) through the usual
evaluation, batch and schedule routes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from assay.api_auth import ReadAccess, WriteAccess
from assay.api_errors import ApiError
from assay.api_models import READ_ERRORS, WRITE_ERRORS, ErrorBody, PolicyImport, PolicyList
from assay.api_wiring import Services
from schemas.policy import POLICY_NAME_PATTERN, SET_NAME_PATTERN, ImportedPolicy, ImportReport
from workers.fleet.policy_store import PolicyStore, UnreadablePolicy

router = APIRouter(prefix="/v1")
PolicyName = Annotated[str, Path(pattern=POLICY_NAME_PATTERN, description="A policy's name.")]
SetName = Annotated[str, Path(pattern=SET_NAME_PATTERN, description="A policy set's name.")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such policy or set."},
}


def _store(request: Request) -> PolicyStore:
    services: Services = request.app.state.services
    return PolicyStore.from_settings(services.settings, services.redis)


@router.post("/policies/import", response_model=ImportReport, tags=["policies"],
             responses=WRITE_ERRORS)  # fmt: skip
def import_policies(body: PolicyImport, request: Request, scope: WriteAccess) -> ImportReport:
    """Import policies as checks; what was imported and what was refused (with the reason)."""
    from workers.core.policies.documents import UnreadableFile, documents_from_text
    from workers.fleet.policy_store import import_into

    try:
        documents = documents_from_text(body.documents, body.source)
    except UnreadableFile as exc:
        raise ApiError(422, "validation_error", f"documents: {exc}.") from None
    if not documents:
        raise ApiError(422, "validation_error", "documents: the text holds no documents.")
    report, _ = import_into(
        None if body.dry_run else _store(request),
        documents,
        policy_set=body.policy_set,
        dry_run=body.dry_run,
    )
    return report


@router.get("/policies", response_model=PolicyList, tags=["policies"], responses=READ_ERRORS)
def list_policies(request: Request, scope: ReadAccess) -> PolicyList:
    """Every imported policy and every set."""
    store = _store(request)
    loaded = store.many(store.names())
    return PolicyList(policies=[p for p in loaded.values() if p is not None], sets=store.sets())


def _policy(store: PolicyStore, name: str) -> ImportedPolicy:
    try:
        policy = store.get(name)
    except UnreadablePolicy as exc:
        raise ApiError(404, "policy_not_found", f"{exc}.") from None
    if policy is None:
        raise ApiError(404, "policy_not_found", f"No imported policy is named {name!r}.")
    return policy


@router.get("/policies/{name}", response_model=ImportedPolicy, tags=["policies"],
            responses={**READ_ERRORS, **_NOT_FOUND})  # fmt: skip
def get_policy(name: PolicyName, request: Request, scope: ReadAccess) -> ImportedPolicy:
    """One imported policy: its rules, params and the documents it came from."""
    return _policy(_store(request), name)


@router.get(
    "/policies/{name}/export",
    tags=["policies"],
    responses={**READ_ERRORS, **_NOT_FOUND, 200: {"content": {"application/yaml": {}}}},
)
def export_policy(
    name: PolicyName,
    request: Request,
    scope: ReadAccess,
    format: Annotated[Literal["vap", "kyverno"], Query(description="vap or kyverno")] = "vap",
    action: Annotated[Literal["Audit", "Warn", "Deny"] | None, Query()] = None,
) -> Response:
    """The policy as a ValidatingAdmissionPolicy (+ binding, + params) or a Kyverno
    ValidatingPolicy, validated before it is written (422 with the reason otherwise)."""
    from workers.core.probes.export import NotExportable, export_policy_yaml

    policy = _policy(_store(request), name)
    try:
        text = export_policy_yaml(policy, format, action=action)
    except NotExportable as exc:
        raise ApiError(422, "policy_not_exportable", f"{exc}.") from None
    return Response(content=text, media_type="application/yaml")


@router.delete("/policies/{name}", status_code=204, tags=["policies"],
               responses={**WRITE_ERRORS, **_NOT_FOUND})  # fmt: skip
def drop_policy(name: PolicyName, request: Request, scope: WriteAccess) -> Response:
    """Forget an imported policy (and its place in every set)."""
    if not _store(request).drop(name):
        raise ApiError(404, "policy_not_found", f"No imported policy is named {name!r}.")
    return Response(status_code=204)


@router.delete("/policy-sets/{name}", status_code=204, tags=["policies"],
               responses={**WRITE_ERRORS, **_NOT_FOUND})  # fmt: skip
def drop_policy_set(name: SetName, request: Request, scope: WriteAccess) -> Response:
    """Forget a policy set; its policies stay."""
    if not _store(request).drop_set(name):
        raise ApiError(404, "policy_set_not_found", f"No policy set is named {name!r}.")
    return Response(status_code=204)
