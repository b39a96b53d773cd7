"""A kernel environment made with pip vs uv (``themisto data build --project-envs --installer uv``).

Run from the repository root (uv on the PATH, or ``THEMISTO_UV=/path/to/uv``; ``pip install uv``)::

    python benchmarks/bench_env_installers.py [--requirements FILE] [--rounds 3]

Each measurement is `themisto_env.sandbox.environments.venv.make_venv` of the same spec (default:
``tests/fixtures/environments/requirements.txt``, pandas 1.5.3 and numpy 1.26.4, plus ipykernel and dill as
every environment) into a fresh environments folder (``THEMISTO_CACHE`` set to a new temporary folder), so
the venv is made every time. Package caches (pip's and uv's) live in one temporary folder for the whole run:
round 1 starts with both empty (cold: every wheel fetched from the index), later rounds find them filled
(warm: the usual case once a machine has made one environment). pip and uv alternate, the order reversed
every other round. Both install from the same indexes (uv is given pip's configured ones). Printed: seconds
per installer and round, the warm medians, the speed-up, and whether the two venvs hold the same versions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from themisto_env.sandbox.environments.environment_spec import make_spec
from themisto_env.sandbox.environments.venv import make_venv, uv_command

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requirements", type=Path, default=ROOT / "tests/fixtures/environments/requirements.txt")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if uv_command() is None:
        raise SystemExit("no uv: pip install uv, or set THEMISTO_UV")
    spec = make_spec(args.requirements)
    caches = Path(tempfile.mkdtemp(prefix="bench-installers-"))
    os.environ["PIP_CACHE_DIR"] = str(caches / "pip")
    os.environ["UV_CACHE_DIR"] = str(caches / "uv")
    seconds: dict[str, list[float]] = {"pip": [], "uv": []}
    packages: dict[str, dict[str, str]] = {}
    print(f"spec {spec.id}: {', '.join(spec.requirements)} (+ ipykernel, dill)")
    for round_ in range(args.rounds):
        order = ["pip", "uv"] if round_ % 2 == 0 else ["uv", "pip"]
        for installer in order:
            os.environ["THEMISTO_CACHE"] = tempfile.mkdtemp(prefix=f"{installer}-", dir=caches)
            started = time.perf_counter()
            record = make_venv(spec, None, installer)  # type: ignore[arg-type]
            seconds[installer].append(time.perf_counter() - started)
            packages[installer] = record.packages
            state = "cold" if round_ == 0 else "warm"
            print(f"round {round_ + 1} ({state}) {installer}: {seconds[installer][-1]:.1f} s")
    print()
    print("| installer | cold (round 1) s | warm median s | packages |")
    print("| --- | ---: | ---: | ---: |")
    for installer, values in seconds.items():
        warm = statistics.median(values[1:]) if len(values) > 1 else float("nan")
        print(f"| {installer} | {values[0]:.1f} | {warm:.1f} | {len(packages[installer])} |")
    if args.rounds > 1:
        ratio = statistics.median(seconds["pip"][1:]) / statistics.median(seconds["uv"][1:])
        print(f"\nwarm speed-up of uv over pip: {ratio:.1f}x; cold: {seconds['pip'][0] / seconds['uv'][0]:.1f}x")
    differ = {
        name: (packages["pip"].get(name), packages["uv"].get(name))
        for name in set(packages["pip"]) | set(packages["uv"])
        if packages["pip"].get(name) != packages["uv"].get(name)
    }
    print("same versions in both venvs" if not differ else f"versions differ: {sorted(differ.items())[:8]}")


if __name__ == "__main__":
    main()
