"""What a policy set costs per tick: API requests and wall time. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_policy_sets.py [--policies 200] [--targets 50] [--threads 8]

A set of N imported policies (the example policies and the CEL corpus's, repeated under
new names up to N) is run on T clusters of the test API server (assay/testing/
fake_apiserver.py, serving the example snapshots in turn), through the live backend and
the real kubernetes client, as one tick of a schedule of ``policy-set:NAME`` does: one
task per target (``evaluate_policy_request``, what the worker calls; each policy's verdict
recorded as its own run in a private redis-server), on a pool of worker threads.

Printed: list requests per target and in all, the most requests for one (kind, namespace)
on one target (the rule: one), what the same policies cost run one by one (no sharing),
and the tick's wall time and the median time per target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from assay.redis_process import RedisProcess  # noqa: E402
from assay.testing.fake_apiserver import FakeApiServer  # noqa: E402
from assay.testing.fake_cluster import FakeCluster  # noqa: E402
from schemas.policy import ImportedPolicy  # noqa: E402
from schemas.request import ContextTarget, EvaluationRequest  # noqa: E402
from schemas.settings import AssaySettings, load_settings  # noqa: E402
from workers.engine.engine import EngineDeps  # noqa: E402
from workers.engine.logs import configure_logging  # noqa: E402
from workers.engine.toolsets.live_backend import LiveBackend  # noqa: E402
from workers.fleet.policy_rerun import evaluate_policy_request  # noqa: E402
from workers.fleet.policy_store import PolicyStore  # noqa: E402
from workers.fleet.redis_client import connect  # noqa: E402
from workers.fleet.store import VerdictStore  # noqa: E402
from workers.policy_engine.policies.documents import read_files  # noqa: E402
from workers.policy_engine.policies.importer import import_documents  # noqa: E402
from workers.policy_engine.policies.run import run_policies  # noqa: E402

SNAPSHOTS = ["prod-eu", "staging-us", "dev-ap"]


def policies(count: int) -> list[ImportedPolicy]:
    files = sorted((ROOT / "examples" / "policies").glob("*.yaml"))
    corpus = ROOT / "tests" / "fixtures" / "cel_corpus"
    files += sorted(corpus.glob("*/policy.yaml"))
    files += sorted(corpus.glob("gatekeeper-*/template.yaml"))
    files += sorted(corpus.glob("gatekeeper-*/samples/constraint.yaml"))
    base, _ = import_documents(read_files(files))
    return [
        base[n % len(base)].model_copy(update={"name": f"{base[n % len(base)].name}-{n}"})
        for n in range(count)
    ]


def listed_collection(path: str) -> str | None:
    """The collection a request lists (``pods``, ``prod/deployments.apps``), or None for
    discovery, OpenAPI documents and single objects."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "c":
        parts = parts[2:]  # the test server's cluster prefix
    if len(parts) < 2 or parts[0] not in ("api", "apis"):
        return None
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    group = "" if parts[0] == "api" else parts[1]
    suffix = f".{group}" if group else ""
    if len(rest) == 1:
        return rest[0] + suffix
    if len(rest) == 3 and rest[0] == "namespaces":
        return f"{rest[1]}/{rest[2]}{suffix}"
    return None


def lists_by_target(server: FakeApiServer) -> dict[str, Counter[str]]:
    """Per cluster, how often each collection was listed (pages of one listing count once)."""
    out: dict[str, Counter[str]] = {}
    for request in server.requests:
        collection = listed_collection(request.path)
        if request.cluster is None or collection is None or request.query.get("continue"):
            continue
        out.setdefault(request.cluster, Counter())[collection] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", type=int, default=200)
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    configure_logging(load_settings(log_level="WARNING"))
    chosen = policies(args.policies)
    kinds = {
        kind.name
        for policy in chosen
        for rule in policy.rules
        for group in rule.match
        for term in group
        for kind in term.kinds or []
    }
    print(
        f"{len(chosen)} policies ({len(kinds)} kinds named) over {args.targets} targets, "
        f"{args.threads} worker threads"
    )
    clusters = [
        FakeCluster.from_snapshot(ROOT / "examples/snapshots" / SNAPSHOTS[n % 3], name=f"t{n:03d}")
        for n in range(args.targets)
    ]
    with tempfile.TemporaryDirectory() as tmp, FakeApiServer(clusters) as server:
        (Path(tmp) / "redis").mkdir()
        redis_server = RedisProcess(data_dir=Path(tmp) / "redis").start()
        try:
            kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
            settings = load_settings(
                kubeconfig=str(kubeconfig),
                redis_url=redis_server.url,
                kube_qps=50,
                log_level="WARNING",
            )
            shared_tick(settings, chosen, [c.name for c in clusters], server, args.threads)
            one_by_one(settings, chosen, clusters[0].name, server, args.targets)
        finally:
            redis_server.stop()
    return 0


def shared_tick(
    settings: AssaySettings,
    chosen: list[ImportedPolicy],
    targets: list[str],
    server: FakeApiServer,
    threads: int,
) -> None:
    """One tick of ``policy-set:bench`` on every target, as the worker runs it."""
    client = connect(settings.redis_url or "")
    store = VerdictStore.from_settings(settings, client=client)
    policy_store = PolicyStore.from_settings(settings, client)
    policy_store.save(chosen, "bench")
    deps = EngineDeps(settings=settings)

    def tick(name: str) -> float:
        target = ContextTarget(context=name, kubeconfig=settings.kubeconfig)
        request = EvaluationRequest(text="policy-set:bench", target=target)
        began = time.perf_counter()
        outcome = evaluate_policy_request(request, deps, policy_store)
        for child in outcome.children:
            store.record_verdict(child)
        store.record_verdict(outcome.report)
        assert outcome.report.policy_set is not None, outcome.report.verdict
        return time.perf_counter() - began

    # the kubernetes client is imported on first use; not by eight threads at once
    LiveBackend.from_target(ContextTarget(context=targets[0]), settings).close()
    server.clear_requests()
    began = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        seconds = list(pool.map(tick, targets))
    wall = time.perf_counter() - began
    per_target = lists_by_target(server)
    requests = [sum(c.values()) for c in per_target.values()]
    worst = max((max(c.values()) for c in per_target.values()), default=0)
    print("shared (a set, one task per target):")
    print(
        f"  list requests: {sum(requests)} in all, per target median "
        f"{statistics.median(requests):g} (max {max(requests)})"
    )
    print(f"  most lists of one (kind, namespace) on one target: {worst}")
    print(
        f"  tick wall time: {wall:.2f} s; per target median "
        f"{statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms"
    )
    print(f"  verdicts recorded: {len(chosen) * len(targets)} policy runs, {len(targets)} set runs")


def one_by_one(
    settings: AssaySettings,
    chosen: list[ImportedPolicy],
    target: str,
    server: FakeApiServer,
    targets: int,
) -> None:
    """The same policies each on its own (no shared listings), on one target."""
    server.clear_requests()
    backend = LiveBackend.from_target(ContextTarget(context=target), settings)
    began = time.perf_counter()
    for policy in chosen:
        run_policies([policy], backend)
    alone = time.perf_counter() - began
    unshared = sum(sum(c.values()) for c in lists_by_target(server).values())
    print("unshared (each policy on its own, one target):")
    print(
        f"  list requests: {unshared} for one target "
        f"(x{targets} targets: {unshared * targets}); {alone:.2f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
