"""``themisto kernel-env create`` time, cold and cached, timed as a user runs it (the CLI in a subprocess).

In a cache of its own (``THEMISTO_CACHE`` set to a temporary folder, so pip's cache starts empty too), for
a requirements file with older packages (default: ``tests/fixtures/environments/requirements.txt``, pandas 1.5.3
and numpy 1.26.4, plus ``six`` so that its id, and so its docker image, is not the tests' one):

1. cold: nothing cached, every wheel downloaded from the index;
2. warm: the environment removed (``kernel-env rm``), made again from pip's cache;
3. cached: made again while it exists (the content id is found: nothing is built);
4. with ``--docker`` (unless ``--no-docker``): the image built from the venv (the debootstrap base of the
   kernel image is reused when the machine has it), then again (cached);

then the environment and its image are removed. Prints a Markdown table::

    python benchmarks/bench_kernel_environments.py [--requirements FILE] [--no-docker]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def themisto(*args: str, env: dict[str, str]) -> tuple[float, str]:
    """Run ``themisto ARGS``; return the seconds it took and its output."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "themisto_env.cli", *args], env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"themisto {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return seconds, " ".join(proc.stdout.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--requirements", type=Path, default=ROOT / "tests" / "fixtures" / "environments" / "requirements.txt"
    )
    parser.add_argument("--no-docker", action="store_true", help="Skip the docker image rows.")
    args = parser.parse_args()
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-env-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(args.requirements.read_text() + "six==1.16.0\n")
        env = {**os.environ, "THEMISTO_CACHE": str(Path(tmp) / "cache"), "COLUMNS": "200"}
        create = ("kernel-env", "create", "bench", "--requirements", str(requirements))
        seconds, out = themisto(*create, env=env)
        rows.append(("cold (empty caches, downloads)", seconds, out))
        themisto("kernel-env", "rm", "bench", env=env)
        seconds, out = themisto(*create, env=env)
        rows.append(("warm (pip's cache, new venv)", seconds, out))
        seconds, out = themisto(*create, env=env)
        rows.append(("cached (the environment exists)", seconds, out))
        if not args.no_docker:
            seconds, out = themisto(*create, "--docker", env=env)
            rows.append(("--docker, image cold (base image cached)", seconds, out))
            seconds, out = themisto(*create, "--docker", env=env)
            rows.append(("--docker, cached", seconds, out))
        themisto("kernel-env", "rm", "bench", env=env)  # its venv and its image
    print("| `themisto kernel-env create` | seconds | output |")
    print("| --- | ---: | --- |")
    for what, seconds, out in rows:
        print(f"| {what} | {seconds:.1f} | {out[:150]} |")


if __name__ == "__main__":
    main()
