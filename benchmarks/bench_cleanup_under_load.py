"""The SIGKILL cleanup test, run again and again on a busy machine (issue 39, "nothing outlives its owner").

Run from the repository root::

    python benchmarks/bench_cleanup_under_load.py [--runs 20] [--test NODE_ID]

Each run is a fresh ``pytest`` process on one test (by default
``tests/sandbox/test_template.py::test_nothing_outlives_the_owner[SIGKILL]``), so the session's own check
that no run directory is left behind counts too. The test makes its own load (the ``busy_machine`` fixture:
two CPU-bound processes per core and a writer syncing a file) and SIGKILLs an owner while it forks kernels,
with a cell's worker writing into the kernel's folder. Prints each run's outcome and wall time, then the
count of runs that passed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEST = "tests/sandbox/test_template.py::test_nothing_outlives_the_owner[SIGKILL]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--test", default=DEFAULT_TEST)
    args = parser.parse_args()
    passed, times = 0, []
    for run in range(1, args.runs + 1):
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "pytest", args.test, "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        took = time.monotonic() - started
        times.append(took)
        ok = result.returncode == 0
        passed += ok
        lines = [line for line in result.stdout.splitlines() if line.startswith("E ")]
        outcome = "passed" if ok else "FAILED"
        print(f"run {run:2d}: {outcome} in {took:5.1f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
        for line in lines[:5]:
            print(f"        {line[:200]}", flush=True)
    median, worst = statistics.median(times), max(times)
    print(f"{passed} of {args.runs} passed; wall time per run: median {median:.1f} s, max {worst:.1f} s")


if __name__ == "__main__":
    main()
