"""Kyverno's fine-grained PolicyExceptions (``images``, ``allowedValues``) are served as
Kyverno serves them: a ValidatingPolicy reads ``exceptions.allowedImages`` and
``exceptions.allowedValues``, per object the lists of every exception whose conditions
match it, in order (empty lists when none does, and for a policy without exceptions). A
full exemption found leaves the object unjudged whatever the grants; an error in an
exception's condition before one is found is the policy's error for that object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.policy import PolicyResult
from tests.cli_support import run_cli as run
from tests.kyverno_support import deployment, snapshot_of, write_objects
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.export import NotExportable, export_policy_documents

# Pods add only the capabilities of the list, or those their PolicyExceptions grant their
# image; a policy reading exceptions in a variable, a match condition and its message too.
CAPABILITIES = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: capabilities}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchConditions:
    - name: not-waived
      expression: "!('WAIVED' in exceptions.allowedValues)"
  variables:
    - name: allowed
      expression: "['CHOWN', 'KILL']"
    - name: granted
      expression: "exceptions.allowedValues"
  validations:
    - expression: >-
        object.spec.containers.all(c,
          c.?securityContext.?capabilities.?add.orValue([]).all(cap,
            cap in variables.allowed ||
            (c.image in exceptions.allowedImages && cap in variables.granted)))
      messageExpression: "'granted: ' + exceptions.allowedValues.join(',')"
"""


def _grant(
    name: str, conditions: list[str], images: list[str] | None, values: list[str] | None
) -> str:
    spec: dict[str, Any] = {
        "policyRefs": [{"name": "capabilities", "kind": "ValidatingPolicy"}],
        "matchConditions": [
            {"name": f"c{number}", "expression": text} for number, text in enumerate(conditions)
        ],
    }
    if images is not None:
        spec["images"] = images
    if values is not None:
        spec["allowedValues"] = values
    document = {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "PolicyException",
        "metadata": {"name": name, "namespace": "kyverno"},
        "spec": spec,
    }
    return yaml.safe_dump(document)


IN_LAB = "object.metadata.namespace == 'lab'"
LAB_NGINX = _grant("lab-nginx", [IN_LAB], ["nginx:1.27"], ["NET_ADMIN"])


def _pod(name: str, namespace: str, image: str, add: list[str], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "containers": [
                {"name": "app", "image": image, "securityContext": {"capabilities": {"add": add}}}
            ]
        },
    }


def _deployment(name: str, namespace: str, image: str, add: list[str]) -> dict[str, Any]:
    return deployment(name, namespace, _pod(name, namespace, image, add)["spec"])


OBJECTS = [
    _pod("plain", "shop", "nginx:1.27", ["CHOWN"]),  # the list allows it
    _pod("lab-web", "lab", "nginx:1.27", ["NET_ADMIN"]),  # granted: lab, its image
    _pod("lab-tool", "lab", "busybox:1", ["NET_ADMIN"]),  # lab, not its image
    _pod("shop-web", "shop", "nginx:1.27", ["NET_ADMIN"]),  # its image, not in lab
    _deployment("lab-app", "lab", "nginx:1.27", ["NET_ADMIN"]),  # Kyverno's pod-controller form
]


def _run(tmp_path: Path, *texts: str, objects: list[dict[str, Any]] = OBJECTS) -> PolicyResult:
    policies, refusals = import_documents(documents_from_text("---\n".join(texts), "p.yaml"))
    assert refusals == [] and len(policies) == 1, refusals
    (result,), _ = run_policies(policies, snapshot_of(tmp_path / "cluster", *objects))
    return result


def _violations(result: PolicyResult) -> dict[str, str]:
    return {v.name: v.message for v in result.violations}


def test_a_fine_grained_exception_grants_its_lists_to_the_objects_it_matches(
    tmp_path: Path,
) -> None:
    result = _run(tmp_path, CAPABILITIES, LAB_NGINX)
    assert result.verdict == "false", result
    # lab-web and the lab Deployment are granted NET_ADMIN for nginx; shop-web's namespace
    # is not lab (no exception matches: empty lists), lab-tool's image is not granted
    assert _violations(result) == {"lab-tool": "granted: NET_ADMIN", "shop-web": "granted: "}
    assert result.judged_total == 5


def test_a_policy_reads_empty_lists_without_exceptions(tmp_path: Path) -> None:
    result = _run(tmp_path, CAPABILITIES)
    assert _violations(result) == {
        "lab-web": "granted: ",
        "lab-tool": "granted: ",
        "shop-web": "granted: ",
        "lab-app": "granted: ",
    }


EXEMPT_TOOL = _grant("tool", ["object.metadata.name == 'lab-tool'"], None, None)


@pytest.mark.parametrize("full_first", [True, False], ids=["exemption-first", "grant-first"])
def test_a_full_exemption_leaves_the_object_unjudged_before_or_after_a_grant(
    tmp_path: Path, full_first: bool
) -> None:
    """lab-tool is matched by both: exempt (not judged), whichever comes first; lab-web is
    granted, shop-web neither."""
    exceptions = [EXEMPT_TOOL, LAB_NGINX] if full_first else [LAB_NGINX, EXEMPT_TOOL]
    result = _run(tmp_path, CAPABILITIES, *exceptions)
    assert _violations(result) == {"shop-web": "granted: "}
    assert result.judged_total == 4, result


# errs on an object without a tier label
TIERED = _grant("tiered", ["object.metadata.labels['tier'] == 'edge'"], ["nginx:1.27"], ["X"])
UNLABELLED = [_pod("lab-tool", "lab", "busybox:1", ["NET_ADMIN"])]


def test_an_error_in_a_grants_condition_before_an_exemption_is_the_policys(
    tmp_path: Path,
) -> None:
    """Kyverno tries the exceptions in order: the grant's condition errs before the exemption
    of lab-tool is found, so the policy errs for it (no verdict); found first, the exemption
    leaves lab-tool unjudged and the grant's condition is never evaluated."""
    erring = _run(tmp_path, CAPABILITIES, TIERED, EXEMPT_TOOL, objects=UNLABELLED)
    assert erring.verdict == "cannot_determine", erring
    assert 'Key not found in map : "tier"' in (erring.reason or ""), erring.reason
    exempt = _run(tmp_path, CAPABILITIES, EXEMPT_TOOL, TIERED, objects=UNLABELLED)
    assert (exempt.verdict, exempt.judged_total) == ("true", 0), exempt
    labelled = [_pod("lab-tool", "lab", "nginx:1.27", ["X"], tier="edge")]
    granted = _run(tmp_path, CAPABILITIES, TIERED, objects=labelled)
    assert (granted.verdict, granted.judged_total) == ("true", 1), granted


# the policy with its grants written in: it reads no exceptions
PLAIN = (
    CAPABILITIES.replace("!('WAIVED' in exceptions.allowedValues)", "true")
    .replace("exceptions.allowedImages", "['nginx:1.27']")
    .replace("exceptions.allowedValues", "['X']")
)


def test_a_grants_condition_errs_even_where_the_policy_reads_no_exceptions(
    tmp_path: Path,
) -> None:
    """Kyverno evaluates every exception's conditions before the policy, whether or not it
    reads exceptions: an error there is the policy's."""
    assert "exceptions" not in PLAIN
    assert _run(tmp_path, PLAIN, objects=UNLABELLED).verdict == "false"
    result = _run(tmp_path, PLAIN, TIERED, objects=UNLABELLED)
    assert result.verdict == "cannot_determine", result


def test_a_grants_condition_giving_no_boolean_is_an_error(tmp_path: Path) -> None:
    """Kyverno's match errs on a condition whose value is not a boolean."""
    named = _grant("named", ["object.metadata.name"], ["nginx:1.27"], ["X"])
    for policy in (PLAIN, CAPABILITIES):
        result = _run(tmp_path, policy, named, objects=UNLABELLED)
        assert result.verdict == "cannot_determine", result
        exempt = _run(tmp_path, policy, EXEMPT_TOOL, named, objects=UNLABELLED)
        assert (exempt.verdict, exempt.judged_total) == ("true", 0), exempt


def test_a_policys_match_condition_reads_the_grants(tmp_path: Path) -> None:
    """The policy's own match conditions read exceptions too (Kyverno binds it before them):
    an object granted WAIVED is not judged."""
    waived = _grant("waived", ["object.metadata.name == 'shop-web'"], None, ["WAIVED"])
    result = _run(tmp_path, CAPABILITIES, LAB_NGINX, waived)
    assert _violations(result) == {"lab-tool": "granted: NET_ADMIN"}
    assert result.judged_total == 4


def _exception_doc(spec: dict[str, Any]) -> str:
    refs = {"policyRefs": [{"name": "capabilities", "kind": "ValidatingPolicy"}]}
    return yaml.safe_dump(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "PolicyException",
            "metadata": {"name": "odd", "namespace": "kyverno"},
            "spec": {**refs, **spec},
        }
    )


REFUSED = [
    (
        _exception_doc({"images": ["a"], "matchConditions": [{"name": "x", "expression": _READS}]}),
        "PolicyException kyverno/odd reads exceptions in a condition",
    )
    for _READS in ("size(exceptions.allowedImages) == 0",)
] + [
    (
        _exception_doc({"matchConditions": [{"name": "x", "expression": "variables.granted"}]}),
        "PolicyException kyverno/odd reads variables in a condition",
    ),
    (
        _exception_doc({"images": [1]}),
        "PolicyException kyverno/odd images is not a list of strings",
    ),
    (
        _exception_doc({"images": [f"registry.example.com/image-{n}:1" for n in range(200)]}),
        "grant more than an expression of 4000 characters holds",
    ),
]


@pytest.mark.parametrize(("exception", "reason"), REFUSED)
def test_a_grant_assay_cannot_serve_refuses_the_policy(exception: str, reason: str) -> None:
    imported, refusals = import_documents(
        documents_from_text(CAPABILITIES + "---\n" + exception, "p")
    )
    assert imported == []
    assert any(reason in r.reason for r in refusals), refusals


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("exceptions.allowedValues.join", "exceptions.join"), "it reads exceptions.join"),
        (
            ("name: granted", "name: assay_granted"),
            "'assay_granted', and names beginning assay_ are assay's",
        ),
    ],
    ids=["another-field", "a-reserved-variable"],
)
def test_a_policy_reading_exceptions_otherwise_is_refused(
    change: tuple[str, str], reason: str
) -> None:
    policy = CAPABILITIES.replace(*change)
    imported, refusals = import_documents(documents_from_text(policy, "p"))
    assert imported == [] and any(reason in r.reason for r in refusals), refusals


def test_exceptions_export_to_kyverno_as_written_and_not_to_a_vap() -> None:
    """Kyverno gives its own exceptions (empty lists without PolicyExceptions): the policy
    is written as it is; a ValidatingAdmissionPolicy has none."""
    (policy,), _ = import_documents(documents_from_text(CAPABILITIES, "p"))
    documents = export_policy_documents(policy, "kyverno")
    assert [d["kind"] for d in documents] == ["ValidatingPolicy"]
    assert "assay_" not in json.dumps(documents)
    assert documents[0]["spec"]["variables"][1]["expression"] == "exceptions.allowedValues"
    with pytest.raises(NotExportable, match="reads Kyverno's exceptions"):
        export_policy_documents(policy, "vap")
    granted, _ = import_documents(documents_from_text(CAPABILITIES + "---\n" + LAB_NGINX, "p"))
    with pytest.raises(NotExportable, match="PolicyExceptions"):
        export_policy_documents(granted[0], "kyverno")


def test_exceptions_is_kyvernos_only() -> None:
    """Anywhere but a Kyverno ValidatingPolicy `exceptions` is undeclared, as in Kubernetes,
    and an expression may not read the adapter's variable by its name."""
    from workers.policy_engine.cel.programs import EXCEPTIONS_VARIABLE, BoolProgram, CelError

    with pytest.raises(CelError, match=r"undeclared reference to 'exceptions\.allowedImages'"):
        BoolProgram("size(exceptions.allowedImages) == 0")
    granted = [(EXCEPTIONS_VARIABLE, "{'allowedImages': ['a'], 'allowedValues': []}")]
    assert BoolProgram("'a' in exceptions.allowedImages", variables=granted)({})
    with pytest.raises(CelError, match=r"reads variables\.assay_exceptions"):
        BoolProgram(f"size(variables.{EXCEPTIONS_VARIABLE}) == 2", variables=granted)


@pytest.mark.integration
def test_probe_show_and_test_say_what_the_grants_do(
    capsys: pytest.CaptureFixture[str], cli_store: Path
) -> None:
    tmp_path = cli_store
    write_objects(tmp_path / "cluster", *OBJECTS)
    (tmp_path / "policy.yaml").write_text("---\n".join((CAPABILITIES, EXEMPT_TOOL, LAB_NGINX)))
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 0 and "refused" not in out + err, out + err
    code, out, _ = run(capsys, "probe", "show", "policy:capabilities")
    assert code == 0, out
    # each rule (the pod's and its two pod-controller forms): the exceptions in their order,
    # as written, the grant with what it adds; the adapter's variable is not shown
    assert out.count("exempt by PolicyException kyverno/tool when: (") == 3, out
    granted = (
        "PolicyException kyverno/lab-nginx adds to exceptions.allowedImages [nginx:1.27] and "
        "to exceptions.allowedValues [NET_ADMIN] when: ( object.metadata.namespace == 'lab' )\n"
    )
    assert out.count(granted) == 3, out
    assert out.index("kyverno/tool") < out.index("kyverno/lab-nginx") < out.index("not-waived")
    assert "assay_" not in out and "? true : true" not in out, out
    code, out, _ = run(capsys, "probe", "test", "policy:capabilities", "--snapshot", "cluster")
    assert code == 1, out
    assert "(4 judged, 1 violate it)" in out and "Pod shop/shop-web: granted: \n" in out, out


def test_a_policy_with_every_variable_taken_cannot_read_exceptions_too() -> None:
    """The grants are one variable more: a policy with as many as a probe holds is refused,
    saying so, not cut short."""
    from schemas.probe import MAX_VARIABLES

    more = "".join(f"    - {{name: v{n}, expression: '{n}'}}\n" for n in range(MAX_VARIABLES - 2))
    policy = CAPABILITIES.replace("  variables:\n", "  variables:\n" + more)
    imported, refusals = import_documents(documents_from_text(policy, "p"))
    assert imported == [], imported
    assert (
        f"it has {MAX_VARIABLES} variables, and assay holds {MAX_VARIABLES}" in refusals[0].reason
    )
    without = policy.replace("exceptions.allowedValues", "[]")
    without = without.replace("exceptions.allowedImages", "[]")
    assert len(import_documents(documents_from_text(without, "p"))[0]) == 1


def test_the_bench_judges_a_fixture_whose_exception_is_named_as_its_policy(
    tmp_path: Path,
) -> None:
    """Kyverno's own tests of fine-grained exceptions name the exception as the policy and
    create it first: the fixture is still one of a policy validating with CEL."""
    from dataclasses import replace

    from assay.testing.policy_corpus import read_library, validates_with_cel

    suites = Path(__file__).resolve().parents[1] / "fixtures" / "policy_suites"
    fixture = read_library(suites / "chainsaw").fixtures[0]
    exception = tmp_path / "exception.yaml"
    exception.write_text(_exception_doc({}).replace("name: odd", f"name: {fixture.policy}"))
    assert validates_with_cel(fixture)
    assert validates_with_cel(
        replace(fixture, policy_files=(str(exception), *fixture.policy_files))
    )
