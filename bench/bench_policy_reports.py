"""What per-object PolicyReports cost: stored bytes, build time, report parts. Prints figures.

    .venv/bin/python bench/bench_policy_reports.py [--objects 3062] [--failing 0.5]

A snapshot of N Pods in 10 namespaces (a share of them running as root) is judged by one
imported ValidatingAdmissionPolicy as a set run, recorded in a private redis-server as
the worker records it; then the reports are built as `assay report` and the sink build
them (``gather`` + ``documents``) and printed as YAML.

Printed: the policy run's time; the run report's bytes in Redis (compressed, as stored)
and per judged object; the reports' count, results and JSON bytes (the largest part); the
time to gather and build them, and to print them as YAML.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import yaml  # noqa: E402

from assay.redis_process import RedisProcess  # noqa: E402
from notifier.policy_reports import documents, gather  # noqa: E402
from schemas.request import EvaluationRequest, SnapshotTarget  # noqa: E402
from schemas.settings import load_settings  # noqa: E402
from workers.engine.engine import EngineDeps  # noqa: E402
from workers.engine.logs import configure_logging  # noqa: E402
from workers.fleet.policy_rerun import evaluate_policy_request  # noqa: E402
from workers.fleet.policy_store import PolicyStore  # noqa: E402
from workers.fleet.store import VerdictStore  # noqa: E402
from workers.policy_engine.policies.documents import read_files  # noqa: E402
from workers.policy_engine.policies.importer import import_documents  # noqa: E402

POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "run-as-non-root"},
    "spec": {
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                }
            ]
        },
        "validations": [
            {
                "expression": "object.spec.containers.all(c, "
                "c.?securityContext.?runAsUser.orValue(1) != 0)",
                "messageExpression": "'containers run as root: ' + object.spec.containers"
                ".filter(c, c.?securityContext.?runAsUser.orValue(1) == 0)"
                ".map(c, c.name).join(', ')",
            }
        ],
    },
}


def pods(count: int, failing: float) -> list[dict[str, object]]:
    """Pods named and identified as a cluster names them: a random ReplicaSet hash and
    suffix, a random uid (what compression cannot squeeze)."""
    every = max(1, round(1 / failing)) if failing > 0 else 0
    rng = random.Random(7)
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"app-{n:05d}-{''.join(rng.choices(alphabet, k=10))}-"
                f"{''.join(rng.choices(alphabet, k=5))}",
                "namespace": f"team-{n % 10}",
                "uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "labels": {"app.kubernetes.io/name": f"app-{n:05d}"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": f"registry.example.com/app-{n:05d}:1.0",
                        "securityContext": {"runAsUser": 0 if every and n % every == 0 else 1000},
                    }
                ]
            },
        }
        for n in range(count)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=3062)
    parser.add_argument("--failing", type=float, default=0.5, help="share running as root")
    args = parser.parse_args(argv)
    configure_logging(load_settings(log_level="WARNING"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chdir(root)  # the snapshot roots
        (root / "snaps" / "fleet").mkdir(parents=True)
        listing = {"apiVersion": "v1", "kind": "List", "items": pods(args.objects, args.failing)}
        (root / "snaps" / "fleet" / "pods.json").write_text(json.dumps(listing))
        (root / "policy.yaml").write_text(yaml.safe_dump(POLICY))
        (root / "redis").mkdir()
        redis_server = RedisProcess(data_dir=root / "redis").start()
        try:
            settings = load_settings(redis_url=redis_server.url, log_level="WARNING")
            store = VerdictStore.from_settings(settings)
            policies = PolicyStore.from_settings(settings, store.client)
            imported, _ = import_documents(read_files([str(root / "policy.yaml")]))
            policies.save(imported, "bench")
            request = EvaluationRequest(
                text="policy-set:bench", target=SnapshotTarget(path="snaps/fleet")
            )
            store.register_run(request)
            store.begin_delivery(request)
            began = time.perf_counter()
            outcome = evaluate_policy_request(request, EngineDeps(settings=settings), policies)
            ran = time.perf_counter() - began
            for child in outcome.children:
                store.record_verdict(child)
            store.record_verdict(outcome.report)
            (child,) = outcome.children
            assert child.policy is not None
            judged = child.policy.judged_total
            stored = store.client.hget(store.key("run", child.run_id), "report") or b""
            raw = len(child.model_dump_json().encode())
            began = time.perf_counter()
            reports = documents(gather(store, "snapshot:fleet"), "snapshot:fleet")
            built = time.perf_counter() - began
            sizes = [len(json.dumps(d)) for d in reports]
            began = time.perf_counter()
            dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
            text = yaml.dump_all(reports, Dumper=dumper, sort_keys=False, width=100)
            printed = time.perf_counter() - began
        finally:
            redis_server.stop()
    results = sum(len(d["results"]) for d in reports)
    print(f"{args.objects} Pods in 10 namespaces, {args.failing:.0%} running as root")
    print(f"  policy run: {ran:.2f} s, {judged} objects judged")
    print(
        f"  run report: {raw / 1024:.0f} KiB as JSON, {len(stored) / 1024:.0f} KiB stored "
        f"({len(stored) / max(judged, 1):.0f} bytes per judged object)"
    )
    print(
        f"  reports: {len(reports)} documents, {results} results, largest "
        f"{max(sizes) / 1024:.0f} KiB of JSON; gather + build {built:.2f} s"
    )
    print(f"  as YAML: {len(text) / 1024:.0f} KiB in {printed:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
