"""What a forked kernel does after the fork, step by step (issue 38, "less work after the fork").

Run from the repository root (the bundled data is built into the cache the first time)::

    python benchmarks/bench_fork_child.py [--children 15]

This process becomes a kernel template as the template's program does (the program's parts, the bundled
data's imports, the kernel's own imports, the application built before the fork, ``gc.freeze``), then forks
children that finish the application as a forked kernel does (``_finish_app``: sockets, threads, the kernel
object, ...) and exit before serving. Each child times every step of ``IPKernelApp.initialize`` (wall ms
and minor page faults: a fault is a page of the template's the child copied, or a new one), then the pure
parts of a first cell it runs before it answers (``_warm_first_cell``), alternating two kinds side by side:

* **now**: the template listed the loaded modules and looked for startup files (``ForkedKernelApp``);
* **before**: the child lists every loaded module (ipykernel's kernel object, for its debugger) and looks for
  startup files itself (ipykernel's own ``init_kernel`` and ``init_code``, as the template did before).

Medians. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.template.zygote import HELPER_FILE, program_source, write_program
from themisto_env.state.copies import imported_modules

#: ``IPKernelApp.initialize``'s steps after its first (ipykernel 7), in its order.
STEPS = (
    "init_pdb",
    "init_blackhole",
    "init_connection_file",
    "init_poller",
    "init_sockets",
    "init_heartbeat",
    "write_connection_file",
    "log_connection_info",
    "init_io",
    "init_signal",
    "init_kernel",
    "init_path",
    "init_shell",
    "init_gui_pylab",
    "init_extensions",
    "init_code",
)


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def become_template(folder: Path, preload: list[str]) -> tuple[types.ModuleType, Any]:
    """This process as a kernel template: the program's parts, the imports, the application, frozen."""
    write_program(folder)
    program = types.ModuleType("themisto_zygote")
    program.__file__ = str(folder / "zygote.py")
    exec(compile(program_source(), program.__file__, "exec"), program.__dict__)
    import dill  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401

    program._install_helper(str(folder / HELPER_FILE))
    for name in preload:
        with contextlib.suppress(BaseException):
            importlib.import_module(name)
    program._warm_up(str(folder))
    app = program._prebuild(None)
    if app is None:
        raise SystemExit("the template could not build the application (see its log above)")
    gc.collect()
    gc.freeze()
    return program, app


def child(program: types.ModuleType, app: Any, folder: Path, number: int, before: bool) -> dict[str, float]:
    """Fork a child that finishes ``app`` on a connection file of its own and reports its steps."""
    connection_file = folder / f"kernel-{number}.json"
    ports = {f"{name}_port": i + 1 for i, name in enumerate(("shell", "iopub", "stdin", "control", "hb"))}
    info = {"transport": "ipc", "ip": str(folder / f"k{number}"), "key": "", **ports}
    connection_file.write_text(json.dumps({**info, "signature_scheme": "hmac-sha256", "kernel_name": ""}))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        figures: dict[str, float] = {}
        try:
            os.close(read_end)
            program._redirect_output(str(folder / f"kernel-{number}.log"))
            figures["fork (faults)"] = faults()
            app.parent_handle = os.getppid()
            if before:
                from ipykernel.kernelapp import IPKernelApp

                for name in ("init_kernel", "init_code"):
                    setattr(app, name, functools.partial(getattr(IPKernelApp, name), app))
            for name in STEPS:
                step = getattr(app, name)

                def timed(*args: Any, _step: Any = step, _name: str = name, **kwargs: Any) -> Any:
                    started, faulted = time.perf_counter(), faults()
                    try:
                        return _step(*args, **kwargs)
                    finally:
                        figures[_name] = (time.perf_counter() - started) * 1000
                        figures[f"{_name} (faults)"] = faults() - faulted

                setattr(app, name, timed)
            started, faulted, cpu = time.perf_counter(), faults(), time.thread_time()
            program._finish_app(app, str(connection_file))
            figures["finish, all"] = (time.perf_counter() - started) * 1000
            figures["finish, all (faults)"] = faults() - faulted
            figures["finish, all (CPU ms)"] = (time.thread_time() - cpu) * 1000
            started, faulted = time.perf_counter(), faults()
            program._warm_first_cell(app)  # a forked kernel's last step before it answers
            figures["warm the first cell's parts"] = (time.perf_counter() - started) * 1000
            figures["warm the first cell's parts (faults)"] = faults() - faulted
            rollup = Path("/proc/self/smaps_rollup").read_text()
            figures["private dirty MiB"] = int(re.search(r"Private_Dirty:\s+(\d+)", rollup).group(1)) / 1024  # type: ignore[union-attr]
            os.write(write_end, json.dumps(figures).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--children", type=int, default=15, help="children of each kind")
    args = parser.parse_args()
    dataset = Dataset.open()
    preload = list(imported_modules(list(dataset.trajectories.values()), submodules=True))
    console = Console()
    with tempfile.TemporaryDirectory(prefix="fork-child-") as tmp:
        program, app = become_template(Path(tmp), preload)
        rows: dict[str, list[dict[str, float]]] = {"before": [], "now": []}
        for i in range(args.children):
            for kind in rows:
                rows[kind].append(child(program, app, Path(tmp), 2 * i + (kind == "now"), before=kind == "before"))
    console.print(
        f"{args.children} children of each kind, alternating; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores; {len(sys.modules)} modules loaded"
    )
    table = Table("after the fork (medians)", "before ms", "before faults", "now ms", "now faults")
    names = [*STEPS, "finish, all", "warm the first cell's parts"]
    for name in names:

        def median(kind: str, key: str) -> float:
            return statistics.median(row.get(key, 0.0) for row in rows[kind])

        table.add_row(
            name,
            f"{median('before', name):.2f}",
            f"{median('before', f'{name} (faults)'):.0f}",
            f"{median('now', name):.2f}",
            f"{median('now', f'{name} (faults)'):.0f}",
        )
    for name in ("finish, all (CPU ms)", "fork (faults)", "private dirty MiB"):
        before, now = (statistics.median(row.get(name, 0.0) for row in rows[kind]) for kind in ("before", "now"))
        table.add_row(name, f"{before:.1f}", "", f"{now:.1f}", "")
    console.print(table)


if __name__ == "__main__":
    main()
