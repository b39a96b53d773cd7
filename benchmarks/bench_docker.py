"""Latencies of the ``docker`` kernel backend (and the ``local`` one for comparison).

Run from the repository root, with a Docker engine and the kernel image (``bash .ci/setup-docker.sh``)::

    python benchmarks/bench_docker.py [--starts 10] [--round-trips 200] [--json]

Measured, each as the median over repetitions (the machine may be shared; the load average is printed):

* ``docker run --rm --init --network none IMAGE true``: the engine's floor for a container;
* kernel start to ready: ``Kernel(backend).start()`` (container run, kernel boot, first ``kernel_info``
  reply, helper installed) and the bare part of it (launcher start + jupyter_client ``wait_for_ready``);
* the ``1+1`` round trip through ``Kernel.execute``;
* interrupt (a ``time.sleep`` cell, SIGINT through tini, until the reply), restart and close.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from themisto_env.sandbox.backends.docker import DockerLauncher
from themisto_env.sandbox.image.spec import default_image
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.models import SandboxLimits


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def container_floor(n: int) -> list[float]:
    cmd = ["docker", "run", "--rm", "--init", "--network", "none", default_image(), "true"]
    return timed(lambda: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL), n)


def bare_start(n: int) -> list[float]:
    """Launcher start + jupyter_client's wait_for_ready, no helper: the backend's own cost."""
    samples = []
    for _ in range(n):
        run_dir = Path(tempfile.mkdtemp(prefix="themisto-bench-"))
        os.chmod(run_dir, 0o777)
        info_path = run_dir / "kernel.json"
        _, info = write_connection_file(
            str(info_path), transport="ipc", ip=str(run_dir / "k"), key=uuid.uuid4().hex.encode()
        )
        os.chmod(info_path, 0o644)
        launcher = DockerLauncher(SandboxLimits(), shared_dirs=(run_dir,))
        started = time.perf_counter()
        launcher.start(info_path, run_dir)
        client = BlockingKernelClient()
        client.load_connection_info(info)
        client.start_channels(hb=False)
        client.wait_for_ready(timeout=60)
        samples.append(time.perf_counter() - started)
        client.stop_channels()
        launcher.stop(graceful=False)
        subprocess.run(["rm", "-rf", str(run_dir)], check=False)
    return samples


def kernel_figures(backend: str, starts: int, round_trips: int) -> dict[str, float]:
    start, close = [], []
    for _ in range(starts):
        kernel = Kernel(backend)
        began = time.perf_counter()
        kernel.start()
        start.append(time.perf_counter() - began)
        began = time.perf_counter()
        kernel.close()
        close.append(time.perf_counter() - began)
    with Kernel(backend) as kernel:
        kernel.execute("1+1")
        rtt = timed(lambda: kernel.execute("1+1"), round_trips)
        interrupts = []
        for _ in range(5):
            began = time.perf_counter()
            result = kernel.execute("import time; time.sleep(30)", timeout_s=0.5)
            assert result.status == "timeout" and not result.kernel_restarted
            interrupts.append(time.perf_counter() - began - 0.5)
        restart = timed(kernel.restart, 3)
    return {
        "start_to_ready_ms": median_ms(start),
        "start_to_ready_min_ms": round(min(start) * 1000, 2),
        "round_trip_1p1_ms": median_ms(rtt),
        "interrupt_ms": median_ms(interrupts),
        "restart_ms": median_ms(restart),
        "close_ms": median_ms(close),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    figures: dict[str, object] = {"image": default_image(), "load_average": os.getloadavg()}
    figures["container_true_ms"] = median_ms(container_floor(args.starts))
    figures["docker_bare_start_to_ready_ms"] = median_ms(bare_start(args.starts))
    for backend in ("docker", "local"):
        figures[backend] = kernel_figures(backend, args.starts, args.round_trips)
    figures["load_average_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"{key:32} {value}")


if __name__ == "__main__":
    main()
