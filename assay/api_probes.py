"""The ``/v1/checks/{check_id}/probe`` routes: a check's probe, as ``assay probe`` shows it.

``GET`` the probe with its agreement history; ``DELETE`` it (the next run asks the model);
``GET .../export?format=vap|kyverno`` its admission policy as YAML; ``POST .../test`` runs it
now against a target (a snapshot under the server's snapshot roots, or a context) and returns
the verdict and what it read. Reading needs the read scope; dropping and testing (which reads
a cluster on the caller's behalf) need the write scope.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from assay.api_auth import ReadAccess, WriteAccess
from assay.api_errors import ApiError
from assay.api_json import StrictJsonRoute
from assay.api_models import (
    OUTSIDE_ROOTS,
    READ_ERRORS,
    WRITE_ERRORS,
    ErrorBody,
    ProbeTest,
    ProbeView,
    state_refusals,
)
from assay.api_wiring import Services
from schemas import ids
from schemas.probe import ProbeRecord, ProbeRun
from workers.fleet.probe_store import ProbeStore

router = APIRouter(prefix="/v1", route_class=StrictJsonRoute)
CheckId = Annotated[ids.CheckId, Path(description="A check id.")]
_NO_PROBE: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "The check has no probe."},
}
_READ = {**READ_ERRORS, **_NO_PROBE}
_WRITE = {**WRITE_ERRORS, **_NO_PROBE}  # a body, and a token that may write


def _probes(request: Request) -> tuple[Services, ProbeStore]:
    services: Services = request.app.state.services
    settings = services.settings
    store = ProbeStore(
        services.redis, prefix=settings.key_prefix, history_limit=settings.probe_history_limit
    )
    return services, store


def _record(store: ProbeStore, check_id: str) -> ProbeRecord:
    record = store.current(check_id)
    if record is None:
        raise ApiError(404, "probe_not_found", f"Check {check_id!r} has no probe.")
    return record


@router.get("/checks/{check_id}/probe", response_model=ProbeView, tags=["probes"],
            responses=_READ)  # fmt: skip
def get_probe(check_id: CheckId, request: Request, scope: ReadAccess) -> ProbeView:
    """The check's current probe, its agreement history and its versions."""
    _, store = _probes(request)
    record = _record(store, check_id)
    versions = [v.version for v in store.versions(check_id)]
    return ProbeView(probe=record, agreement=store.agreement(check_id), versions=versions)


@router.delete("/checks/{check_id}/probe", status_code=204, tags=["probes"], responses=_WRITE)
def drop_probe(check_id: CheckId, request: Request, scope: WriteAccess) -> Response:
    """Forget the check's probe, its versions and its history."""
    _, store = _probes(request)
    if not store.drop(check_id):
        raise ApiError(404, "probe_not_found", f"Check {check_id!r} has no probe.")
    return Response(status_code=204)


@router.get(
    "/checks/{check_id}/probe/export",
    tags=["probes"],
    responses={
        **_READ,
        409: {
            "model": ErrorBody,
            "description": "The stored probe holds what the format cannot express "
            "(probe_not_exportable, with the reason).",
        },
        200: {"content": {"application/yaml": {}}},
    },
)
def export_probe(
    check_id: CheckId,
    request: Request,
    scope: ReadAccess,
    format: Annotated[Literal["vap", "kyverno"], Query(description="vap or kyverno")] = "vap",
    action: Annotated[Literal["Audit", "Warn", "Deny"], Query()] = "Audit",
) -> Response:
    """The probe as a ValidatingAdmissionPolicy + binding, or a Kyverno ValidatingPolicy."""
    from workers.policy_engine.probes.export import NotExportable, export_yaml

    _, store = _probes(request)
    record = _record(store, check_id)
    try:
        text = export_yaml(record, format, action=action)
    except NotExportable as exc:
        raise ApiError(409, "probe_not_exportable", f"{exc}.") from None
    return Response(content=text, media_type="application/yaml")


@router.post("/checks/{check_id}/probe/test", response_model=ProbeRun, tags=["probes"],
             responses={**WRITE_ERRORS, **state_refusals(
                 f"the check has no probe (probe_not_found), or {OUTSIDE_ROOTS}")})  # fmt: skip
def test_probe(
    check_id: CheckId, body: ProbeTest, request: Request, scope: WriteAccess
) -> ProbeRun:
    """Run the probe now against ``target``: its verdict, or why it could not run.

    The run has a time budget bound to the cluster it reads (the check's, or the body's
    shorter ``timeout_seconds``): a live cluster that hangs would otherwise hold this API
    worker thread for as long as the kube client retries, per lookup. A longer
    ``timeout_seconds`` is capped to the check's budget: the server's settings bound how long
    a request holds a thread, not the caller, and "at most N seconds" still holds.
    """
    from workers.engine.toolsets.factory import ToolsetUnavailable, backend_for
    from workers.policy_engine.probes.runner import check_timeout_seconds, run_probe_for

    services, store = _probes(request)
    record = _record(store, check_id)
    limit = check_timeout_seconds(record.profile, services.settings)
    seconds = min(body.timeout_seconds or limit, limit)
    target = services.confined_target(body.target)
    try:
        backend = backend_for(target, services.settings)
    except ToolsetUnavailable as exc:
        return ProbeRun(error=f"the target cannot be read: {exc}")
    except OSError as exc:  # e.g. a path name longer than the file system takes
        return ProbeRun(error=f"the target cannot be read: {exc.strerror or exc}")
    try:
        return run_probe_for(record.probe, backend, seconds)
    finally:
        backend.close()
