"""The /v1/policies routes through real HTTP against a real `assay api` process: import
(a POST on the collection: 201 when it stored a new policy, 200 otherwise; a dry run stores
nothing; refusals come back with their reasons), list, read, export as YAML (or 422 with
the reason), and forget a policy or a set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from assay.redis_process import RedisProcess
from tests.api_support import READ_TOKEN, WRITE_TOKEN, ApiServer, auth
from tests.translation_support import NULL_SENSITIVE, deployment
from workers.fleet.policy_store import PolicyStore
from workers.fleet.redis_client import connect

pytestmark = pytest.mark.integration

PREFIX = "policyapi"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"
TEXT = "\n---\n".join(p.read_text() for p in sorted(EXAMPLES.glob("*.yaml")))


@pytest.fixture(scope="module")
def api(
    redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    server = ApiServer(
        redis_server.url,
        tmp_path_factory.mktemp("api") / "api.log",
        settings={"ASSAY_KEY_PREFIX": PREFIX},
    ).start()
    yield server
    server.stop()


@pytest.fixture
def store(redis_url: str) -> PolicyStore:
    return PolicyStore(connect(redis_url), prefix=PREFIX)


def _post(api: ApiServer, body: dict[str, object], token: str = WRITE_TOKEN) -> httpx.Response:
    return httpx.post(f"{api.url}/v1/policies", json=body, headers=auth(token), timeout=30)


def test_import_list_read_export_and_forget(api: ApiServer, store: PolicyStore) -> None:
    assert _post(api, {"documents": TEXT}, READ_TOKEN).status_code == 403
    dry = _post(api, {"documents": TEXT, "policy_set": "baseline", "dry_run": True})
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    assert store.names() == []  # a dry run stores nothing

    done = _post(api, {"documents": TEXT, "policy_set": "baseline", "source": "examples"})
    assert done.status_code == 201, done.text
    assert sorted(done.json()["imported"]) == [
        "prod-workloads-labelled",
        "run-as-non-root",
        "trusted-registries",
    ]
    assert done.json()["refused"] == [] and done.json()["policy_set"] == "baseline"
    again = _post(api, {"documents": TEXT, "policy_set": "baseline", "source": "examples"})
    assert again.status_code == 200, again.text  # nothing new: every policy replaced
    assert sorted(again.json()["replaced"]) == sorted(done.json()["imported"])

    listed = httpx.get(f"{api.url}/v1/policies", headers=auth(READ_TOKEN), timeout=10).json()
    assert listed["sets"] == {"baseline": sorted(done.json()["imported"])}
    one = httpx.get(
        f"{api.url}/v1/policies/trusted-registries", headers=auth(READ_TOKEN), timeout=10
    )
    assert one.status_code == 200 and one.json()["format"] == "vap"

    exported = httpx.get(
        f"{api.url}/v1/policies/trusted-registries/export",
        params={"format": "vap", "action": "Deny"},
        headers=auth(READ_TOKEN),
        timeout=10,
    )
    assert exported.status_code == 200
    _, binding, params = yaml.safe_load_all(exported.text)
    assert binding["spec"]["validationActions"] == ["Deny"] and params["kind"] == "ConfigMap"
    refused = httpx.get(
        f"{api.url}/v1/policies/trusted-registries/export",
        params={"format": "kyverno"},
        headers=auth(READ_TOKEN),
        timeout=10,
    )
    assert refused.status_code == 409, refused.text  # what the stored policy holds: state
    assert refused.json()["error"]["code"] == "policy_not_exportable"

    gone = httpx.delete(f"{api.url}/v1/policy-sets/baseline", headers=auth(WRITE_TOKEN), timeout=10)
    assert gone.status_code == 204 and store.set_members("baseline") is None
    gone = httpx.delete(
        f"{api.url}/v1/policies/run-as-non-root", headers=auth(WRITE_TOKEN), timeout=10
    )
    assert gone.status_code == 204
    missing = httpx.get(
        f"{api.url}/v1/policies/run-as-non-root", headers=auth(READ_TOKEN), timeout=10
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "policy_not_found"


def test_import_is_a_name_like_any_other(api: ApiServer, store: PolicyStore) -> None:
    """There is no /v1/policies/import action: "import" is a policy name, and its path
    serves what every policy's path serves (a 405 says GET and DELETE, not POST)."""
    missing = httpx.get(f"{api.url}/v1/policies/import", headers=auth(READ_TOKEN), timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "policy_not_found"
    posted = _post(api, {"documents": TEXT})
    assert posted.status_code == 201
    refused = httpx.post(
        f"{api.url}/v1/policies/import",
        json={"documents": TEXT},
        headers=auth(WRITE_TOKEN),
        timeout=10,
    )
    assert refused.status_code == 405
    assert set(refused.headers["allow"].split(", ")) == {"GET", "DELETE"}


def test_refusals_and_bad_text_are_answered(api: ApiServer, store: PolicyStore) -> None:
    old = TEXT.replace("size(variables.root) == 0", "request.userInfo.username != ''")
    answer = _post(api, {"documents": old})
    assert answer.status_code == 201  # the two others are new (each test's Redis is empty)
    (refusal,) = answer.json()["refused"]
    assert refusal["name"] == "run-as-non-root" and "request.userInfo" in refusal["reason"]
    assert _post(api, {"documents": TEXT, "policy_set": "Not A Set"}).status_code == 422
    everything_refused = _post(api, {"documents": "apiVersion: v1\nkind: ConfigMap\n"})
    assert everything_refused.status_code == 200 and everything_refused.json()["imported"] == []


def test_text_holding_no_policy_is_refused_in_the_report(
    api: ApiServer, store: PolicyStore
) -> None:
    """Before: a 422, though the published schema calls every string valid (no JSON Schema
    can say which strings are YAML). Now refused as a document that is not a policy is: 200,
    the reason in `refused`, nothing stored, a set left as it was."""
    assert _post(api, {"documents": TEXT, "policy_set": "kept"}).status_code == 201
    kept = store.sets()
    for text, reason in (
        ("kind: [", "policies.yaml is not YAML or JSON: line 1"),
        ("a: \u0082", "policies.yaml is not YAML or JSON: unacceptable character #x0082"),
        ("0", "the text holds no document (a YAML or JSON object)"),  # YAML, no document
        ("---\n---\n", "the text holds no document (a YAML or JSON object)"),
    ):
        body = {"documents": text, "policy_set": "kept", "source": "policies.yaml"}
        answer = _post(api, body)
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert report["imported"] == [] and report["policy_set"] is None, text
        (refusal,) = report["refused"]
        assert refusal["kind"] == "(text)" and refusal["source"] == "policies.yaml"
        assert refusal["reason"].startswith(reason), (text, refusal)
    assert store.sets() == kept
    translated = _translate(api, {"documents": "kind: ["})
    assert translated.status_code == 200, translated.text
    assert translated.json()["proven"] is False and translated.json()["documents"] is None
    assert translated.json()["refused"].startswith("the documents are unreadable: - is not YAML")


WITH_OBJECTS = (
    NULL_SENSITIVE
    + "---\n"
    + yaml.safe_dump_all([deployment("nulled", None), deployment("set", 2)])
)


def _translate(api: ApiServer, body: dict[str, object], token: str = WRITE_TOKEN) -> httpx.Response:
    return httpx.post(
        f"{api.url}/v1/policy-translations", json=body, headers=auth(token), timeout=60
    )


def test_a_translation_is_answered_only_when_proven(api: ApiServer, store: PolicyStore) -> None:
    assert _translate(api, {"documents": WITH_OBJECTS}, READ_TOKEN).status_code == 403
    proven = _translate(api, {"documents": WITH_OBJECTS, "to": "vap"})
    assert proven.status_code == 200, proven.text
    body = proven.json()
    assert body["proven"] is True and body["objects_judged"] == 2
    kinds = [d["kind"] for d in yaml.safe_load_all(body["documents"])]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    # as Kyverno the null field reads as present: the translation is not proven, not answered
    refused = _translate(api, {"documents": WITH_OBJECTS, "to": "kyverno"})
    assert refused.status_code == 200, refused.text
    body = refused.json()
    assert body["proven"] is False and body["documents"] is None
    assert [(d["name"], d["original"], d["translation"]) for d in body["disagreements"]] == [
        ("nulled", "denied", "allowed")
    ]
    forced = _translate(api, {"documents": WITH_OBJECTS, "to": "kyverno", "force": True})
    assert forced.json()["proven"] is False and "ValidatingPolicy" in forced.json()["documents"]
    broken = _translate(
        api,
        {
            "documents": WITH_OBJECTS.replace(
                "has(object.spec.replicas)", "request.userInfo.username != ''"
            )
        },
    )
    assert broken.status_code == 200
    assert broken.json()["proven"] is False and broken.json()["documents"] is None
    assert "reads request.userInfo" in broken.json()["refused"]
    assert store.names() == []  # a translation stores nothing


def test_a_policy_another_set_holds_is_refused_from_a_set_import(
    api: ApiServer, store: PolicyStore
) -> None:
    """Imported into a second set, a policy replaced the first set's silently: that set's
    check judged by the other team's rules from then on. Refused, with the set named; a
    dry run says so too."""
    one = (EXAMPLES / "kyverno-run-as-non-root.yaml").read_text()
    assert _post(api, {"documents": one, "policy_set": "team-a"}).status_code == 201
    before = store.get("run-as-non-root")
    for dry_run in (True, False):
        answer = _post(api, {"documents": one, "policy_set": "team-b", "dry_run": dry_run})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["imported"] == [] and body["policy_set"] is None
        (refusal,) = body["refused"]
        assert refusal["name"] == "run-as-non-root"
        assert refusal["reason"] == (
            "it already belongs to policy set 'team-a': import it into that set, or drop "
            "policy:run-as-non-root first to move it to 'team-b'"
        )
    assert store.sets() == {"team-a": ["run-as-non-root"]}
    assert store.get("run-as-non-root") == before
    again = _post(api, {"documents": one, "policy_set": "team-a"})  # its own set: replaced
    assert again.status_code == 200 and again.json()["replaced"] == ["run-as-non-root"]
