"""The ``/v1/policies`` routes: import admission policies as checks, as ``assay probe import``.

``POST /v1/policies`` takes the files' text (YAML or JSON documents) and an optional set
name, and answers what was imported and what was refused, with the reason (a dry run stores
nothing): 201 when it stored a policy that did not exist before, 200 otherwise (a dry run,
only replacements, or every policy refused). The import is a POST on the collection, not a
``/v1/policies/import`` path, so no policy name can be taken for an action (or the other
way round) and a path's 405 lists only its own methods. ``GET /v1/policies`` lists the
imported policies and the sets;
``GET /v1/policies/{name}`` one policy; ``GET .../export?format=vap|kyverno`` its admission
policy as YAML; ``DELETE`` forgets it (``DELETE /v1/policy-sets/{name}`` a set).
``POST /v1/policy-translations`` translates policies given in the body (stores nothing) and
answers the proof, as ``assay policy translate``: its own path, so no action is taken for a
policy's name. An imported
policy runs as the check ``policy:NAME`` (a set as ``policy-set:NAME``) through the usual
evaluation, batch and schedule routes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from assay.api_auth import ReadAccess, WriteAccess
from assay.api_errors import ApiError
from assay.api_json import StrictJsonRoute
from assay.api_models import (
    DOCUMENT_WRITE_ERRORS,
    OUTSIDE_ROOTS,
    READ_ERRORS,
    WRITE_ERRORS,
    ErrorBody,
    PolicyImport,
    PolicyList,
    PolicyTranslation,
    PolicyTranslationRequest,
    TranslatedObject,
    links_to,
    state_refusals,
)
from assay.api_wiring import Services
from schemas.policy import (
    POLICY_NAME_PATTERN,
    SET_NAME_PATTERN,
    TEXT_REFUSED,
    ImportedPolicy,
    ImportRefusal,
    ImportReport,
)
from workers.fleet.policy_store import PolicyStore, UnreadablePolicy

router = APIRouter(prefix="/v1", route_class=StrictJsonRoute)
PolicyName = Annotated[
    str,
    Path(pattern=POLICY_NAME_PATTERN, description="A policy's name.", examples=["run-as-non-root"]),
]
SetName = Annotated[
    str, Path(pattern=SET_NAME_PATTERN, description="A policy set's name.", examples=["baseline"])
]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such policy or set."},
}
_NOT_EXPORTABLE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "The stored policy holds what the format cannot express "
    "(policy_not_exportable, with the reason).",
}
POLICY_OPERATIONS = (
    "get_policy_v1_policies__name__get",
    "export_policy_v1_policies__name__export_get",
    "drop_policy_v1_policies__name__delete",
)
SET_OPERATIONS = ("drop_policy_set_v1_policy_sets__name__delete",)


# A 201 leads to the first policy it stored and to the set it made; a 200 to the first
# policy it replaced (stored too), never to `imported`, which on a dry run names policies
# that were not stored (a dry run's `replaced` is empty), nor to its refusals' names.
_IMPORTED: dict[str, Any] = {
    "description": "At least one policy that did not exist before was stored.",
    "model": ImportReport,
    "links": {
        **links_to("name", "/imported/0", *POLICY_OPERATIONS)["links"],
        **links_to("name", "/policy_set", *SET_OPERATIONS)["links"],
    },
}
_NOTHING_NEW: dict[str, Any] = {
    "description": "Nothing new stored: a dry run, replacements only, or all refused.",
    **links_to("name", "/replaced/0", *POLICY_OPERATIONS),
}


def _store(request: Request) -> PolicyStore:
    services: Services = request.app.state.services
    return PolicyStore.from_settings(services.settings, services.redis)


@router.post(
    "/policies",
    response_model=ImportReport,
    tags=["policies"],
    responses={
        **DOCUMENT_WRITE_ERRORS,
        200: _NOTHING_NEW,
        201: _IMPORTED,
    },
)
def import_policies(
    body: PolicyImport, request: Request, response: Response, scope: WriteAccess
) -> ImportReport:
    """Import policies as checks; what was imported and what was refused (with the reason).
    201 when a policy that did not exist before was stored, 200 otherwise."""
    from workers.fleet.policy_store import import_into
    from workers.policy_engine.policies.documents import UnreadableFile, documents_from_text
    from workers.policy_engine.policies.kyverno_exceptions import Acceptance

    try:
        documents = documents_from_text(body.documents, body.source)
    except UnreadableFile as exc:
        return _text_refused(body, str(exc))
    if not documents:
        return _text_refused(body, "the text holds no document (a YAML or JSON object)")
    services: Services = request.app.state.services
    report, _ = import_into(  # the store even for a dry run: it says which set holds a name
        _store(request),
        documents,
        policy_set=body.policy_set,
        dry_run=body.dry_run,
        exceptions_accepted=Acceptance.of(services.settings),
    )
    created = not report.dry_run and set(report.imported) - set(report.replaced)
    response.status_code = 201 if created else 200
    return report


def _text_refused(body: PolicyImport, reason: str) -> ImportReport:
    """Text that holds no policy is refused like a document that is not one (200, the reason
    in ``refused``): no JSON Schema can say which strings are YAML, so the request was valid."""
    refusal = ImportRefusal(source=body.source, kind=TEXT_REFUSED, name="", reason=reason)
    return ImportReport(refused=[refusal], dry_run=body.dry_run)


@router.get(
    "/policies",
    response_model=PolicyList,
    tags=["policies"],
    responses={**READ_ERRORS, 200: links_to("name", "/policies/0/name", *POLICY_OPERATIONS)},
)
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
    responses={
        **READ_ERRORS,
        **_NOT_FOUND,
        409: _NOT_EXPORTABLE,
        200: {"content": {"application/yaml": {}}},
    },
)
def export_policy(
    name: PolicyName,
    request: Request,
    scope: ReadAccess,
    format: Annotated[Literal["vap", "kyverno"], Query(description="vap or kyverno")] = "vap",
    action: Annotated[Literal["Audit", "Warn", "Deny"] | None, Query()] = None,
) -> Response:
    """The policy as a ValidatingAdmissionPolicy (+ binding, + params) or a Kyverno
    ValidatingPolicy, validated before it is written (409 with the reason otherwise: what the
    stored policy holds, not the request, decides whether the format can express it)."""
    from workers.policy_engine.probes.export import NotExportable, export_policy_yaml

    policy = _policy(_store(request), name)
    try:
        text = export_policy_yaml(policy, format, action=action)
    except NotExportable as exc:
        raise ApiError(409, "policy_not_exportable", f"{exc}.") from None
    return Response(content=text, media_type="application/yaml")


@router.post(
    "/policy-translations",
    response_model=PolicyTranslation,
    tags=["policies"],
    responses={**DOCUMENT_WRITE_ERRORS, **state_refusals(f"the target is {OUTSIDE_ROOTS}")},
)
def translate_policies(
    body: PolicyTranslationRequest, request: Request, scope: WriteAccess
) -> PolicyTranslation:
    """Translate policies into a ValidatingAdmissionPolicy (or a Kyverno ValidatingPolicy) and
    prove it: every object given (and of ``target``) judged by the original and by the
    translation. ``documents`` is answered only when they agree on every object (or
    ``force``); ``refused`` says why when the policies cannot be imported or translated, or
    the translation cannot be judged. Write access: it reads a cluster on the caller's
    behalf."""
    import time

    from workers.engine.toolsets.factory import ToolsetUnavailable, backend_for
    from workers.policy_engine.policies.documents import UnreadableFile, documents_from_text
    from workers.policy_engine.probes.export import NotExportable
    from workers.policy_engine.probes.runner import check_timeout_seconds
    from workers.policy_engine.probes.translation import (
        NotProvable,
        NotTranslatable,
        split_documents,
        translate_and_prove,
    )

    services: Services = request.app.state.services
    try:
        documents, objects = split_documents(documents_from_text(body.documents, "-"))
    except UnreadableFile as exc:  # refused like a policy that cannot be translated
        return PolicyTranslation(proven=False, refused=f"the documents are unreadable: {exc}")
    backend = None
    if body.target is not None:
        try:
            backend = backend_for(services.confined_target(body.target), services.settings)
        except ToolsetUnavailable as exc:
            return PolicyTranslation(proven=False, refused=f"the target cannot be read: {exc}")
        except OSError as exc:  # e.g. a path name longer than the file system takes
            reason = f"the target cannot be read: {exc.strerror or exc}"
            return PolicyTranslation(proven=False, refused=reason)
    deadline = time.monotonic() + check_timeout_seconds(None, services.settings)
    try:
        exported, proof = translate_and_prove(
            documents, objects, body.to, action=body.action, target=backend, deadline=deadline
        )
    except (NotTranslatable, NotExportable, NotProvable) as exc:
        return PolicyTranslation(proven=False, refused=str(exc))
    finally:
        if backend is not None:
            backend.close()
    return PolicyTranslation(
        proven=proof.proven,
        documents=exported.yaml() if proof.proven or body.force else None,
        warnings=exported.warnings,
        objects_judged=len(proof.verdicts),
        disagreements=[
            TranslatedObject(
                kind=v.kind,
                namespace=v.namespace,
                name=v.name,
                original=v.original,
                translation=v.translation,
                reason=v.reason,
            )
            for v in proof.disagreements[:100]
        ],
    )


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
