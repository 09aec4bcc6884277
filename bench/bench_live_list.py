"""Time and peak memory of `get pods` over 5,000 pods through the live backend.

The test API server (assay.testing.fake_apiserver) serves generated pods in
this process; a separate worker-like process does the listing through the
real kubernetes client, ``LiveBackend`` and the ``get`` tool, and reports its
own peak RSS (VmHWM), so the server's memory is not counted. Target: the
listing process stays under 150 MB peak RSS. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_live_list.py [--pods 5000] [--page-size 500] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_MB = 150.0


def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # pragma: no cover


def child(kubeconfig: str, page_size: int, materialize: bool) -> None:
    """The listing process: import, note the baseline, run `get pods`, report.

    ``materialize`` instead keeps every pod in a list, to show what streaming saves.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    sys.path.insert(0, str(ROOT))
    from schemas.request import ContextTarget
    from schemas.settings import load_settings
    from workers.engine.toolsets.base import ToolRegistry
    from workers.engine.toolsets.kubernetes import kubernetes_tools
    from workers.engine.toolsets.live_backend import LiveBackend

    settings = load_settings(kubeconfig=kubeconfig, kube_page_size=page_size, kube_qps=1000)
    backend = LiveBackend.from_target(ContextTarget(context="synthetic"), settings)
    tools = ToolRegistry(kubernetes_tools(backend, settings))
    baseline = peak_rss_mb()
    started = time.perf_counter()
    total: int | None
    if materialize:
        pods = list(backend.list_objects(backend.resolve("pods"), None))
        total, output_chars = len(pods), 0
    else:
        result = tools.call("get", {"kind": "pods"})
        total, output_chars = result.meta.get("total"), len(result.output)
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "seconds": seconds,
                "baseline_mb": baseline,
                "peak_mb": peak_rss_mb(),
                "output_chars": output_chars,
                "total": total,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--materialize", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.page_size, args.materialize)
        return

    sys.path.insert(0, str(ROOT))
    from assay.testing.fake_apiserver import FakeApiServer
    from assay.testing.fake_cluster import FakeCluster

    with (
        tempfile.TemporaryDirectory() as folder,
        FakeApiServer([FakeCluster.synthetic(args.pods)]) as server,
    ):
        kubeconfig = server.write_kubeconfig(Path(folder) / "kubeconfig")
        print(f"get pods over {args.pods} pods, page size {args.page_size}, {args.runs} runs")
        print("run  seconds  baseline MB  peak RSS MB  pods counted  output chars")
        peaks = []
        for run in range(1, args.runs + 2):
            materialize = run > args.runs  # a last run that holds the whole list, for contrast
            server.clear_requests()
            command = [sys.executable, __file__, "--child", str(kubeconfig)]
            command += ["--page-size", str(args.page_size)]
            command += ["--materialize"] if materialize else []
            completed = subprocess.run(command, capture_output=True, text=True, check=True)
            figures = json.loads(completed.stdout.strip().splitlines()[-1])
            pages = sum(r.path.endswith("/api/v1/pods") for r in server.requests)
            label = "all" if materialize else f"{run:>3}"
            if not materialize:
                peaks.append(figures["peak_mb"])
            print(
                f"{label:>3}  {figures['seconds']:7.2f}  {figures['baseline_mb']:11.1f}  "
                f"{figures['peak_mb']:11.1f}  {figures['total']!s:>12}  "
                f"{figures['output_chars']:>12}   ({pages} pages)"
            )
        worst = max(peaks)
        verdict = "within" if worst < TARGET_MB else "OVER"
        print("(run 'all' keeps every pod in a Python list instead of streaming: for contrast)")
        print(f"worst peak RSS of get pods {worst:.1f} MB: {verdict} the {TARGET_MB:.0f} MB target")


if __name__ == "__main__":
    main()
