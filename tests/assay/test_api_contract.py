"""The published OpenAPI document and the server agree, rule by rule (in process, fast).

tests/assay/test_api_openapi.py fuzzes the whole API with schemathesis; these name the rules a
client reads in the document one at a time: the target ``type`` is required, a schedule
change takes null only for ``model`` and ``spend``, ``since`` / ``changed_since`` are an RFC 3339
instant or an age, exactly one kind of target, and a 405 lists every method of its path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from assay.api import OPENAPI_PATH, create_app
from schemas.settings import AssaySettings
from tests.conftest import ROOT

TOKEN = "contract-write-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DOCUMENT = json.loads(OPENAPI_PATH.read_text())
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
SCHEDULE = {
    "name": "contract",
    "predicate": PREDICATE,
    "targets": {"snapshots": ["examples/snapshots/prod-eu"]},
    "interval_seconds": 3600,
}


@pytest.fixture
def api(redis_url: str) -> Iterator[TestClient]:
    settings = AssaySettings(
        redis_url=redis_url,
        api_tokens={TOKEN: "write"},
        key_prefix="contract",
        snapshot_roots=[str(ROOT)],
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _schema(name: str) -> dict[str, object]:
    schema: dict[str, object] = DOCUMENT["components"]["schemas"][name]
    return schema


def test_a_405_lists_every_method_its_path_serves(api: TestClient) -> None:
    """Before: Starlette named the first route's method only (OPTIONS /v1/schedules gave
    `Allow: POST`, without GET)."""
    for path, operations in DOCUMENT["paths"].items():
        documented = {method.upper() for method in operations}
        concrete = path.replace("{", "").replace("}", "")  # /v1/runs/run_id: any id will do
        refused = api.request("PUT", concrete, headers=AUTH)
        assert refused.status_code == 405, (path, refused.text)
        assert set(refused.headers["allow"].split(", ")) == documented, path
        assert refused.json()["error"]["code"] == "method_not_allowed"
    options = api.options("/v1/schedules", headers=AUTH)
    assert options.headers["allow"] == "GET, POST"


def test_a_target_must_name_its_type_in_the_document_and_at_the_server(api: TestClient) -> None:
    """Before: `type` was optional in the document (it has a default) but the server could
    not tell the targets apart without it."""
    for name in ("ServerSnapshotTarget", "ServerContextTarget", "InClusterTarget"):
        assert "type" in _schema(name)["required"], name  # type: ignore[operator]
    untyped = api.post(
        "/v1/evaluations",
        headers=AUTH,
        json={"text": PREDICATE, "target": {"path": "examples/snapshots/prod-eu"}},
    )
    assert untyped.status_code == 422
    assert untyped.json()["error"]["details"][0]["type"] == "union_tag_not_found"


# The fields a schedule change may set to null, and what null means: the workers' model
# again; the fleet's default spend ceiling again (`schedule update --default-spend-ceiling`).
NULLABLE_CHANGES = {"model", "spend"}


def test_a_schedule_change_takes_null_only_for_the_model_and_the_spend(api: TestClient) -> None:
    """Before: the document let every field of a change be null, and the server refused a
    null for any field the merged schedule needs (422 for a request the document allows).
    Then: the document let `spend` be null (back to the fleet's default, as docs/api.md
    says) and the server refused it."""
    schema = _schema("ScheduleUpdate")
    properties: dict[str, dict[str, object]] = schema["properties"]  # type: ignore[assignment]
    # A null branch anywhere in the field, not the word in a description.
    nullable = {n for n, field in properties.items() if '"type": "null"' in json.dumps(field)}
    assert nullable == NULLABLE_CHANGES
    created = api.post(
        "/v1/schedules", headers=AUTH, json={**SCHEDULE, "spend": {"tokens": 50_000}}
    )
    assert created.status_code == 201, created.text
    url = f"/v1/schedules/{created.json()['id']}"
    for field in sorted(set(properties) - NULLABLE_CHANGES):
        refused = api.patch(url, headers=AUTH, json={field: None})
        assert refused.status_code == 422, field
        assert "null is not a value here" in refused.json()["error"]["message"], field
    assert api.patch(url, headers=AUTH, json={"model": None}).status_code == 200
    assert api.get(url, headers=AUTH).json()["spend"] == {"tokens": 50_000, "cost_usd": None}
    default = api.patch(url, headers=AUTH, json={"spend": None})
    assert default.status_code == 200 and default.json()["spend"] is None
    both = api.patch(url, headers=AUTH, json={"cron": "0 2 * * *", "interval_seconds": 600})
    assert both.status_code == 422 and "not both" in both.json()["error"]["message"]
    assert schema["not"] == {"required": ["cron", "interval_seconds"]}


@pytest.mark.parametrize("spend", [{}, {"tokens": None}, {"tokens": None, "cost_usd": None}])
def test_a_spend_ceiling_sets_something_in_the_document_and_at_the_server(
    api: TestClient, spend: dict[str, object]
) -> None:
    """Before: the document took `spend: {}` (no ceiling at all), the server refused it."""
    ceiling = _schema("SpendCeiling")
    assert ceiling["minProperties"] == 1
    branches: list[dict[str, object]] = ceiling["anyOf"]  # type: ignore[assignment]
    assert [branch["required"] for branch in branches] == [["tokens"], ["cost_usd"]]
    created = api.post("/v1/schedules", headers=AUTH, json=SCHEDULE)
    assert created.status_code == 201, created.text
    url = f"/v1/schedules/{created.json()['id']}"
    for answer in (
        api.patch(url, headers=AUTH, json={"spend": spend}),
        api.post("/v1/schedules", headers=AUTH, json={**SCHEDULE, "name": "s2", "spend": spend}),
    ):
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["details"][0]["loc"][:2] == ["body", "spend"]
    kept = api.patch(url, headers=AUTH, json={"spend": {"tokens": None, "cost_usd": 2}})
    assert kept.status_code == 200 and kept.json()["spend"] == {"tokens": None, "cost_usd": 2.0}


def _apply_document(kind: str = "Schedule", **spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "predicate": PREDICATE,
        "targets": {"snapshots": ["examples/snapshots/prod-eu"]},
    }
    if kind == "Schedule":
        base["every"] = "1h30m"
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "contract-doc"},
        "spec": {key: value for key, value in {**base, **spec}.items() if value is not None},
    }


def _schema_accepts(body: dict[str, object]) -> bool:
    from jsonschema import Draft202012Validator

    schema = {"$ref": "#/components/schemas/ApplyBody", "components": DOCUMENT["components"]}
    return Draft202012Validator(schema).is_valid(body)


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (_apply_document(), None),
        (_apply_document(every=None, cron="0 2 * * *", timeZone="Europe/Berlin"), None),
        (_apply_document(every=5400, jitter="90s", budget={"timeout": "15m"}), None),
        (_apply_document("Check", profile="smoke", notify=[]), None),
        (_apply_document(targets={"contexts": ["east"], "kubeconfig": "/k"}), "targets.kubeconfig"),
        (_apply_document(every="30s"), "every"),
        (_apply_document(every="0s"), "every"),
        (_apply_document(every=0), "every"),
        (_apply_document(every="400d"), "every"),
        (_apply_document(jitter="2h"), "jitter"),
        (_apply_document(budget={"timeout": "8d"}), "budget.timeout"),
        (_apply_document(cron="0 2 * * *"), "spec"),  # and every
        (_apply_document(timeZone="Europe/Berlin"), "spec"),  # a zone with every
        (_apply_document(every=None, cron="0 2 * * *", timeZone="Mars/Olympus"), "timeZone"),
        (_apply_document(every=None, cron="0 2 30 2 *"), "cron"),  # never fires
        (_apply_document(policy={"name": "p"}), "spec"),  # and a predicate
        (_apply_document(predicate=None, policy={"file": "p.yaml"}), "policy.file"),
        (
            _apply_document("Check", predicate=None, policy={"name": "p"}, evaluation="query"),
            "spec",
        ),
        (_apply_document(predicate=" "), "predicate"),
        (_apply_document(paused=0), "paused"),
        (_apply_document(notify=["a", "a"]), "notify"),
        (_apply_document(targets={"snapshots": ["examples/../snapshots"]}), "targets.snapshots[0]"),
        (_apply_document(targets={"contexts": ["east"], "contextGlob": "e*"}), "targets"),
        (_apply_document(ceilings={}), "ceilings"),
        ({**_apply_document(), "metadata": {"name": "x", "labels": {"Bad Key": "v"}}}, "metadata"),
    ],
)
def test_an_apply_document_is_refused_by_the_schema_exactly_when_the_server_refuses_it(
    api: TestClient, document: dict[str, object], field: str | None
) -> None:
    """Before: `documents` were any objects in the document, and the server refused what it
    judged (422) for rules no client could read there."""
    body = {"source": "contract", "documents": [document], "dry_run": True}
    answer = api.post("/v1/apply", headers=AUTH, json=body)
    assert _schema_accepts(body) is (field is None), document
    if field is None:
        assert answer.status_code == 200, answer.text
        return
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_documents"
    fields = [detail["field"] for detail in error["details"]]
    assert any(f.removeprefix("spec.").startswith(field) or f == field for f in fields), fields
    assert {detail["file"] for detail in error["details"]} == {"documents[0]"}


def test_an_apply_takes_documents_only(api: TestClient) -> None:
    """YAML text is not a field of the body: a client converts its files to JSON."""
    assert "yaml" not in _schema("ApplyBody")["properties"]  # type: ignore[operator]
    for body in ({"yaml": "kind: Schedule\n"}, {}):
        refused = api.post("/v1/apply", headers=AUTH, json={"source": "contract", **body})
        assert refused.status_code == 422, body
        assert not _schema_accepts({"source": "contract", **body})


def test_a_kubeconfig_in_an_apply_document_is_refused_in_one_sentence(api: TestClient) -> None:
    document = _apply_document(targets={"contexts": ["east"], "kubeconfig": "/k"})
    answer = api.post("/v1/apply", headers=AUTH, json={"source": "c", "documents": [document]})
    (detail,) = answer.json()["error"]["details"]
    assert detail["msg"] == (
        "a kubeconfig path cannot be chosen over HTTP; name a context from the server's "
        "kubeconfig instead"
    )
    assert detail["field"] == "spec.targets.kubeconfig"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("1h", True),
        ("1h30m", True),
        ("2D", True),
        ("90", True),
        ("2026-01-01T00:00:00Z", True),
        ("2026-01-01t00:00:00.5+02:00", True),
        ("9999-12-31T23:59:59-23:59", True),  # past year 9999 in UTC: no 500
        ("", False),
        ("yesterday", False),
        ("2026-01-01", False),  # no time, no zone: not RFC 3339
        ("2026-01-01T00:00:00", False),  # no zone
        ("2026-02-30T00:00:00Z", False),
        ("1700000000.5x", False),
    ],
)
def test_since_and_changed_since_are_an_rfc3339_instant_or_an_age(
    api: TestClient, value: str, accepted: bool
) -> None:
    """Before: the document said "a string", and the server refused most strings (422)."""
    for path, name in (("/v1/changes", "since"), ("/v1/checks", "changed_since")):
        answer = api.get(path, headers=AUTH, params={name: value})
        assert (answer.status_code == 200) is accepted, (path, value, answer.text)
        if not accepted:
            assert answer.status_code == 422 and name in answer.json()["error"]["message"]
    for operation, name in (
        (("/v1/changes", "get"), "since"),
        (("/v1/checks", "get"), "changed_since"),
    ):
        (parameter,) = [
            p for p in DOCUMENT["paths"][operation[0]][operation[1]]["parameters"]
            if p["name"] == name
        ]  # fmt: skip
        formats = [option.get("format") for option in parameter["schema"]["anyOf"]]
        assert "date-time" in formats


@pytest.mark.parametrize(
    ("text", "visible"),
    [
        ("\x1f", False),  # a C0 separator: blank to str.strip, not to ECMA-262's \s
        ("\x85 ", False),  # NEXT LINE: the same
        ("\ufeff", False),  # a byte order mark: blank to ECMA-262's \s, not to str.strip
        (" \u3000\t", False),
        ("\ufeffx", True),
        ("\x1fnodes", True),
    ],
)
def test_a_predicate_is_blank_alike_to_the_document_and_the_server(
    api: TestClient, text: str, visible: bool
) -> None:
    """Before: the document published ECMA-262's non-space class and the server tested
    str.strip, so schemathesis' U+001F passed the document and was refused (422), and U+FEFF
    failed it and was accepted. jsonschema_rs, which schemathesis validates with, reads the
    published pattern as ECMA-262 does."""
    import jsonschema_rs

    for name, field in (("EvaluationSubmission", "text"), ("ScheduleCreate", "predicate")):
        schema = _schema(name)["properties"][field]  # type: ignore[index]
        assert jsonschema_rs.validator_for(schema).is_valid(text) is visible, name
    target = {"type": "snapshot", "path": "examples/snapshots/prod-eu"}
    submitted = api.post("/v1/evaluations", headers=AUTH, json={"text": text, "target": target})
    schedule = api.post("/v1/schedules", headers=AUTH, json={**SCHEDULE, "predicate": text})
    for answer in (submitted, schedule):
        if visible:
            assert answer.status_code != 422, answer.text
        else:
            assert answer.status_code == 422, answer.text
            assert "the predicate text is empty" in answer.json()["error"]["message"]


def test_exactly_one_kind_of_target_is_in_the_document(api: TestClient) -> None:
    """Before: "exactly one of contexts, a context glob or snapshots" (and of a batch's
    targets or context glob) was a server rule the document did not state."""
    assert len(_schema("ServerScheduleTargets")["oneOf"]) == 3  # type: ignore[arg-type]
    assert len(_schema("BatchSubmission")["oneOf"]) == 2  # type: ignore[arg-type]
    two_kinds = {**SCHEDULE, "targets": {"snapshots": ["examples/snapshots/prod-eu"],
                                         "contexts": ["east"]}}  # fmt: skip
    refused = api.post("/v1/schedules", headers=AUTH, json=two_kinds)
    assert refused.status_code == 422
    assert "exactly one kind of target" in refused.json()["error"]["message"]


def test_a_kubeconfig_over_http_keeps_its_own_error_code(api: TestClient) -> None:
    target = {"type": "context", "context": "east", "kubeconfig": "/tmp/k"}
    refused = api.post("/v1/evaluations", headers=AUTH, json={"text": PREDICATE, "target": target})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "kubeconfig_not_allowed"


def test_a_schedule_and_a_batch_over_http_run_strict_unless_they_say(api: TestClient) -> None:
    created = api.post("/v1/schedules", headers=AUTH, json=SCHEDULE)
    assert created.status_code == 201 and created.json()["profile"] == "strict"
    chosen = api.post("/v1/schedules", headers=AUTH,
                      json={**SCHEDULE, "name": "chosen", "profile": "fast"})  # fmt: skip
    assert chosen.status_code == 201 and chosen.json()["profile"] == "fast"
    for name in ("BatchSubmission", "ScheduleCreate"):
        profile: dict[str, object] = _schema(name)["properties"]["profile"]  # type: ignore[index]
        assert "default" not in profile and "ASSAY_PROFILE" in str(profile["description"])
    assert _schema("EvaluationSubmission")["properties"]["profile"]["default"] == "fast"  # type: ignore[index]


def test_a_schedule_and_a_batch_over_http_run_the_servers_assay_profile(redis_url: str) -> None:
    """As `assay batch`, `schedule add` and `apply` do (settings.unattended_profile): a
    server started with ASSAY_PROFILE runs a schedule or a batch that names no profile in
    it, not in a literal strict; one that names a profile keeps it."""
    from workers.fleet.redis_client import connect
    from workers.fleet.store import VerdictStore

    settings = AssaySettings(
        redis_url=redis_url,
        api_tokens={TOKEN: "write"},
        key_prefix="contract",
        snapshot_roots=[str(ROOT)],
        profile="smoke",
    )
    with TestClient(create_app(settings)) as api:
        created = api.post("/v1/schedules", headers=AUTH, json=SCHEDULE)
        assert created.status_code == 201 and created.json()["profile"] == "smoke"
        named = {**SCHEDULE, "name": "named", "profile": "strict"}
        assert api.post("/v1/schedules", headers=AUTH, json=named).json()["profile"] == "strict"
        targets = [{"type": "snapshot", "path": "examples/snapshots/prod-eu"}]
        for body, profile in (
            ({"text": PREDICATE, "targets": targets}, "smoke"),
            ({"text": PREDICATE, "targets": targets, "profile": "fast"}, "fast"),
        ):
            batch = api.post("/v1/batches", headers=AUTH, json=body)
            assert batch.status_code in (200, 201, 202), batch.text
            results = api.get(f"/v1/batches/{batch.json()['batch_id']}/results", headers=AUTH)
            (result,) = results.json()["results"]
            store = VerdictStore.from_settings(settings, connect(redis_url))
            request = store.run_request(result["run_id"])
            assert request is not None and request.profile == profile


def test_a_schedules_cron_and_zone_are_the_published_pattern_and_list(api: TestClient) -> None:
    """Before: `format: cron` and `format: iana-time-zone`, which a client cannot read, and
    the server refused most strings (422). Now a pattern and an enum, checked as published."""
    body = {**SCHEDULE}
    body.pop("interval_seconds")
    for cron, zone, status in (
        ("30 1 * * MON-FRI", "Europe/Paris", 201),
        ("0 0 31 * *", "Asia/Tokyo", 201),
        ("0 0 30 2 *", "UTC", 422),  # never fires: outside the pattern
        ("0 9 * * *", "Mars/Olympus_Mons", 422),  # not in the enum
    ):
        answer = api.post(
            "/v1/schedules",
            headers=AUTH,
            json={**body, "name": f"c-{cron}-{zone}".replace("*", "x"), "cron": cron,
                  "timezone": zone},
        )  # fmt: skip
        assert answer.status_code == status, answer.text
        if status == 422:
            assert answer.json()["error"]["code"] == "validation_error"


def test_what_only_the_servers_state_decides_is_a_documented_404_or_409(api: TestClient) -> None:
    """Before: a 422, which says "the request is malformed" though the document allowed it.
    A snapshot outside the roots and a model no provider routes are 404, each documented on
    the operations that take them, with 409 for what the fleet's state cannot serve now."""
    outside = {"type": "snapshot", "path": "/etc"}
    answer = api.post("/v1/evaluations", headers=AUTH, json={"text": PREDICATE, "target": outside})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "snapshot_outside_roots"
    assert answer.json()["error"]["message"].startswith("Snapshot target '/etc'")
    for path, method in (
        ("/v1/evaluations", "post"),
        ("/v1/batches", "post"),
        ("/v1/schedules", "post"),
        ("/v1/schedules/{schedule_id}", "patch"),
        ("/v1/checks/{check_id}/probe/test", "post"),
        ("/v1/policy-translations", "post"),
    ):
        responses = DOCUMENT["paths"][path][method]["responses"]
        assert "snapshot_outside_roots" in responses["404"]["description"], path
    for path in ("/v1/evaluations", "/v1/batches", "/v1/schedules"):
        responses = DOCUMENT["paths"][path]["post"]["responses"]
        assert "unroutable_model" in responses["404"]["description"], path
        assert "model_key_missing" in responses["409"]["description"], path
    batch = DOCUMENT["paths"]["/v1/batches"]["post"]["responses"]
    assert "batch_empty" in batch["404"]["description"]
    assert "context_glob_failed" in batch["409"]["description"]


def test_the_routes_that_take_documents_take_a_folders_worth(redis_url: str) -> None:
    """Before: every body was held to 64 KiB, so a schema-valid apply of a few hundred
    documents, or a policy library the document allows 4 MiB of, got 413. The routes that
    take documents publish and enforce ASSAY_API_MAX_DOCUMENTS_BODY_BYTES for a write token;
    the other routes, and callers without one, keep the small limit."""
    settings = AssaySettings(
        redis_url=redis_url,
        api_tokens={TOKEN: "write", "contract-read-token-0123456789": "read"},
        key_prefix="contract-size",
        snapshot_roots=[str(ROOT)],
        api_max_documents_body_bytes=512 * 1024,
    )
    documents = []
    for n in range(1000):
        document = _apply_document()
        document["metadata"] = {"name": f"doc-{n:04d}"}
        documents.append(document)
    body = {"source": "size", "documents": documents, "dry_run": True}
    assert 64 * 1024 < len(json.dumps(body)) < 512 * 1024
    padded_policies = (ROOT / "examples/policies/kyverno-run-as-non-root.yaml").read_text()
    padded_policies += "# " + "x" * (100 * 1024) + "\n"
    with TestClient(create_app(settings)) as api:
        applied = api.post("/v1/apply", headers=AUTH, json=body)
        assert applied.status_code == 200, applied.text[:500]
        assert len(applied.json()["changes"]) == 1000
        imported = api.post(
            "/v1/policies", headers=AUTH, json={"documents": padded_policies, "dry_run": True}
        )
        assert imported.status_code == 200 and imported.json()["imported"], imported.text[:500]
        small = api.post(
            "/v1/schedules", headers=AUTH, json={**SCHEDULE, "predicate": "x" * (70 * 1024)}
        )
        assert small.status_code == 413, small.text
        too_big = {"documents": padded_policies + "# " + "y" * (512 * 1024)}
        refused = api.post("/v1/policies", headers=AUTH, json=too_big)
        assert refused.status_code == 413, refused.text
        assert "larger than 524288 bytes" in refused.json()["error"]["message"]
        # only a writer makes the server hold a documents-sized body: the others get the
        # small limit, told why, before anything reads the body or judges the token
        reader = {"Authorization": "Bearer contract-read-token-0123456789"}
        for headers in (reader, {"Authorization": "Bearer not-a-token"}, {}):
            answer = api.post("/v1/apply", headers=headers, json=body)
            assert answer.status_code == 413, answer.text
            assert answer.json()["error"]["message"].startswith(
                "The request body is larger than 65536 bytes, the limit without a write "
                "token (with one, 524288 bytes)"
            )
        assert (
            api.post("/v1/apply", headers=reader, json={**body, "documents": []}).status_code == 403
        )
    for path, method, limit in (
        ("/v1/apply", "post", "ASSAY_API_MAX_DOCUMENTS_BODY_BYTES"),
        ("/v1/policies", "post", "ASSAY_API_MAX_DOCUMENTS_BODY_BYTES"),
        ("/v1/policy-translations", "post", "ASSAY_API_MAX_DOCUMENTS_BODY_BYTES"),
        ("/v1/schedules", "post", "ASSAY_API_MAX_BODY_BYTES"),
        ("/v1/evaluations", "post", "ASSAY_API_MAX_BODY_BYTES"),
    ):
        assert limit in DOCUMENT["paths"][path][method]["responses"]["413"]["description"], path


def test_a_key_given_twice_in_a_json_body_is_refused(api: TestClient) -> None:
    """Before: the last of two equal keys won silently, so a body showing source 'a' to its
    author applied (and with prune, pruned) source 'b'. Refused, as kubectl refuses it and
    as `assay apply -f` refuses it in YAML, naming the key; nothing is applied."""
    document = json.dumps(_apply_document())
    bodies = {
        "/v1/apply": (
            '{"source": "a", "prune": true, "source": "b", "documents": []}',
            "source",
        ),
        "/v1/schedules": (
            json.dumps(SCHEDULE)[:-1] + ', "interval_seconds": 7200}',
            "interval_seconds",
        ),
        "/v1/evaluations": (
            '{"text": "x", "target": {"type": "snapshot", "type": "context", '
            '"path": "examples/snapshots/prod-eu"}}',
            "type",
        ),
    }
    nested = document.replace('"every": "1h30m"', '"every": "1h30m", "every": "2h"')
    bodies["/v1/apply#nested"] = ('{"source": "a", "documents": [' + nested + "]}", "every")
    for path, (text, key) in bodies.items():
        answer = api.post(
            path.partition("#")[0],
            headers={**AUTH, "content-type": "application/json"},
            content=text,
        )
        assert answer.status_code == 422, (path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "duplicate_key", (path, error)
        assert error["message"] == (
            f"body: the key {key!r} is given twice in one object; send each key once."
        )
    assert api.get("/v1/schedules", headers=AUTH).json()["schedules"] == []
    assert api.get("/v1/documents/schedules", headers=AUTH).json() == {"documents": []}
    once = document.replace('"every": "1h30m"', '"every": "2h"')
    applied = api.post(
        "/v1/apply",
        headers={**AUTH, "content-type": "application/json"},
        content='{"source": "a", "documents": [' + once + "]}",
    )
    assert applied.status_code == 200, applied.text


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(api: TestClient, constant: str) -> None:
    """Before: Python's reader took them, and a NaN interval was refused as "less than or
    equal to 31622400". Not JSON (RFC 8259): a 400 invalid_json naming the constant."""
    text = json.dumps(SCHEDULE).replace("3600", constant)
    answer = api.post("/v1/schedules", headers={**AUTH, "content-type": "application/json"},
                      content=text)  # fmt: skip
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_json"
    assert error["message"] == (
        f"The request body is not valid JSON ({constant} is not a JSON number); send a JSON object."
    )
