"""How fast the CLI's front door answers when there is nothing to wait for (prints figures).

* an unreachable Redis: each fleet command should say so (exit 69) in about two
  seconds, not after the patient client's half minute of retries;
* ``assay --help`` and an unknown command (exit 64): start-up cost alone.

Run: ``.venv/bin/python bench/bench_front_door.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from assay.redis_process import free_port

COMMANDS = (
    ["--help"],
    ["no-such-command"],
    ["checks"],
    ["verdict", "some-check"],
    ["batch", "status"],
    ["schedule", "list"],
)


def timed(args: list[str], env: dict[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", *args], env=env, capture_output=True, timeout=120
    )
    return done.returncode, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["ASSAY_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    print(f"{'command':<24} {'exit':>4} {'median s':>9} {'max s':>7}")
    for args in COMMANDS:
        runs = [timed(args, env) for _ in range(options.repeat)]
        codes = {code for code, _ in runs}
        seconds = [elapsed for _, elapsed in runs]
        print(
            f"{' '.join(args):<24} {','.join(map(str, sorted(codes))):>4} "
            f"{statistics.median(seconds):9.2f} {max(seconds):7.2f}"
        )


if __name__ == "__main__":
    main()
