"""Making a kernel environment's venv: the Python, the Debian packages on the host, pip, the record.

Every step's output goes to ``<cache>/environments/<id>.log``; a failed step is one
[`ConfigError`][themisto_env.errors.ConfigError] line with pip's own error and the log's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from themisto_env.errors import ConfigError
from themisto_env.sandbox.environments.environment_spec import (
    KERNEL_NEEDS,
    RECORD,
    KernelEnvironmentRecord,
    KernelEnvironmentSpec,
    find_python,
)
from themisto_env.sandbox.environments.location import environment_dir

if TYPE_CHECKING:
    from rich.console import Console


def pip_environment() -> dict[str, str]:
    """The environment pip runs with: its cache under ``$THEMISTO_CACHE/pip`` when that is set."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if root := os.environ.get("THEMISTO_CACHE"):
        env.setdefault("PIP_CACHE_DIR", str(Path(root).expanduser() / "pip"))
    return env


def run_step(what: str, cmd: list[str], log: Path, console: Console | None) -> None:
    """Run one step with its output in ``log``; a failure is one line with pip's own error and the log."""
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if console is not None:
            stack.enter_context(console.status(f"{what}…"))
        out = stack.enter_context(open(log, "ab"))
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=pip_environment(), check=False)
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR") or "error:" in ln.lower()]
        detail = (errors or lines or ["no output"])[0 if errors else -1].strip()
        detail = re.sub(r"\(from versions: ([^)]*)\)", _few_versions, detail)
        raise ConfigError(f"{what} failed (exit {proc.returncode}): {detail[:400]}; log: {log}")
    if console is not None:
        console.print(f"[green]✓[/] {what} ({time.perf_counter() - started:.1f} s)")


Installer = Literal["pip", "uv"]
"""What installs an environment's packages: pip (the default) or uv (``pip install uv``; faster: see
benchmarks/README.md), with the indexes pip is configured with here."""


def uv_command() -> str | None:
    """The uv executable (``$THEMISTO_UV``, else ``uv`` on the PATH); None when there is none."""
    return os.environ.get("THEMISTO_UV") or shutil.which("uv")


def uv_index_options() -> list[str]:
    """pip's configured indexes and find-links as uv options (uv does not read pip's configuration), with
    every index equally trusted, as pip treats them."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, env=pip_environment()
    ).stdout
    options = ["--index-strategy", "unsafe-best-match"]
    flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}
    seen: set[tuple[str, str]] = set()
    for line in out.splitlines():
        key, _, value = line.partition("=")
        flag = flags.get(key.rsplit(".", 1)[-1])
        if flag is None:
            continue
        for item in value.strip().strip("'\"").split():
            if (flag, item) not in seen:
                seen.add((flag, item))
                options += [flag, item]
    return options


def _few_versions(match: re.Match[str]) -> str:
    """pip's ``(from versions: ...)`` list cut to its ends (it names every release)."""
    versions = [v.strip() for v in match.group(1).split(",")]
    shown = versions if len(versions) <= 6 else [*versions[:3], "...", *versions[-3:]]
    return f"(from versions: {', '.join(shown)})"


def ensure_apt_on_host(packages: list[str], log: Path, console: Console | None) -> None:
    """Install the Debian packages a local environment names, where they are missing (needs root)."""
    missing = []
    for package in packages:
        probe = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
        )
        if "install ok installed" not in probe.stdout:
            missing.append(package)
    if not missing:
        return
    if os.geteuid() != 0:
        raise ConfigError(f"Debian packages missing here: `sudo apt-get install {' '.join(missing)}`, then again")
    try:
        run_step("apt-get install " + " ".join(missing), ["apt-get", "install", "-y", "-q", *missing], log, console)
    except ConfigError:
        run_step("apt-get update", ["apt-get", "update", "-q"], log, console)
        run_step("apt-get install " + " ".join(missing), ["apt-get", "install", "-y", "-q", *missing], log, console)


def _folder_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def make_venv(
    spec: KernelEnvironmentSpec, console: Console | None, installer: Installer = "pip"
) -> KernelEnvironmentRecord:
    """Make the venv of ``spec`` with ``installer`` (the same packages either way; uv is faster).

    Raises:
        ConfigError: A step failed (its error and the log's path), or uv was asked for and is not here.
    """
    uv = uv_command() if installer == "uv" else None
    if installer == "uv" and uv is None:
        raise ConfigError("installer uv: no uv here; `pip install uv` (or set THEMISTO_UV), or use pip")
    python = find_python(spec.python)
    final = environment_dir(spec.id)
    final.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if final.exists():  # a record-less folder: a build that was killed
        shutil.rmtree(final)
    work = Path(tempfile.mkdtemp(prefix=f".{spec.id}-", dir=final.parent))
    log = final.parent / f"{spec.id}.log"
    log.write_text(f"kernel environment {spec.id}\n")
    try:
        if spec.apt:
            ensure_apt_on_host(spec.apt, log, console)
        (work / "requirements.txt").write_text(spec.requirements_txt())
        venv_python = str(work / "venv" / "bin" / "python")
        what = f"installing {len(spec.requirements)} requirement(s) with {', '.join(KERNEL_NEEDS)}"
        if uv is not None:
            run_step(
                f"making a Python {spec.python} venv (uv)",
                [uv, "venv", "--seed", "--python", python, str(work / "venv")],
                log,
                console,
            )
            install = [uv, "pip", "install", "--python", venv_python, *uv_index_options()]
            run_step(f"{what} (uv)", [*install, "-r", str(work / "requirements.txt"), *KERNEL_NEEDS], log, console)
        else:
            run_step(f"making a Python {spec.python} venv", [python, "-m", "venv", str(work / "venv")], log, console)
            run_step(
                what,
                [venv_python, "-m", "pip", "install", "-r", str(work / "requirements.txt"), *KERNEL_NEEDS],
                log,
                console,
            )
        check = "import ipykernel, dill, IPython, sys; print('%d.%d.%d' % sys.version_info[:3])"
        probe = subprocess.run([venv_python, "-c", check], capture_output=True, text=True, env=pip_environment())
        if probe.returncode != 0:
            raise ConfigError(f"the new environment cannot run a kernel: {probe.stderr.strip().splitlines()[-1:]}")
        record = KernelEnvironmentRecord(
            id=spec.id,
            spec=spec,
            python_version=probe.stdout.strip(),
            packages=_installed(venv_python),
            size_bytes=_folder_size(work / "venv"),
            build_seconds=round(time.perf_counter() - started, 1),
        )
        (work / RECORD).write_text(record.model_dump_json(indent=2) + "\n")
        work.rename(final)  # a venv runs from another folder through `python -m` (we never use its scripts)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return record


def _installed(python: str) -> dict[str, str]:
    """``pip freeze`` of a venv as name -> version (the venv's own pip and setuptools left out)."""
    out = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json", "--exclude-editable"],
        capture_output=True,
        text=True,
        env=pip_environment(),
        check=True,
    ).stdout
    skip = {"pip", "setuptools", "wheel"}
    return {d["name"].lower(): d["version"] for d in json.loads(out) if d["name"].lower() not in skip}


__all__ = ["Installer", "ensure_apt_on_host", "make_venv", "pip_environment", "run_step", "uv_command"]
