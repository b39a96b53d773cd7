"""A kernel template in a container of its own (the ``docker`` backend's template), whose copies isolate
themselves from each other.

The container is a kernel container (no network, a read-only root, no-new-privileges, the same mounts), but
its process is the template's program (`themisto_env.sandbox.template.zygote`), run as root *inside* with every
capability dropped except ``CAP_SETUID`` and ``CAP_SETGID``: just what it takes to give each forked copy a
uid of its own (``_take_identity``), which drops both for good in that copy. The host sees the container's
processes (one kernel, no user namespace): it gives each copy's folders to its uid beforehand
(`themisto_env.sandbox.kernel.copy_uid`) and watches and signals copies through the pidfds the template
sends.

The template never loads a snapshot (unpickling runs the dataset's code, which must not run with the
capabilities): each copy restores its state itself, under its own uid (see
`themisto_env.sandbox.template.core.NO_STATE_TEMPLATES`).

The container's memory, process and CPU limits are a share for all the copies it holds
(`CONTAINER_SHARE` kernels' worth); each copy's own bounds are rlimits (a cgroup per copy would need
delegation, which a container does not get): ``RLIMIT_NPROC`` by uid, ``RLIMIT_DATA`` and ``RLIMIT_AS``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from themisto_env.sandbox.backends.docker import DockerLauncher
from themisto_env.sandbox.template.zygote import PROGRAM_FILE

__all__ = ["CONTAINER_SHARE", "TEMPLATE_CAPABILITIES", "DockerTemplateLauncher"]

#: The template container's memory, process and CPU limits, in kernels' worth (each copy is bounded by its
#: own rlimits; together they share these).
CONTAINER_SHARE = 4
#: The only capabilities the template keeps (to give each copy its uid); every copy drops them.
TEMPLATE_CAPABILITIES = ("SETUID", "SETGID")


class DockerTemplateLauncher(DockerLauncher):
    """Starts the template's program in a container (see the module's docstring).

    ``config`` (set before ``start``) is the template's configuration; the program and its ``helper`` are in
    the run directory (the template writes them there), as the container sees no host file outside its mounts.
    """

    config: dict[str, Any]

    def start(self, connection_file: Path, workdir: Path) -> None:
        run_dir = connection_file.parent
        super().start(connection_file, workdir)
        # copies pass through the run directory to their own, and see nothing else of it
        for folder in (run_dir, run_dir / "kernels"):
            os.chmod(folder, 0o711)

    def command(self, connection_file: Path) -> list[str]:
        # the connection file's path ends the command line: that is how the host finds the container's init
        return ["python", str(connection_file.parent / PROGRAM_FILE), json.dumps(self.config), str(connection_file)]

    def container_options(self, readonly: set[Path], workdir: Path) -> dict[str, Any]:
        options = super().container_options(readonly, workdir)
        memory = f"{self.limits.memory_mb * CONTAINER_SHARE}m"
        cpus = min(float(os.cpu_count() or 1), self.limits.cpus * CONTAINER_SHARE)
        options.update(
            user="0:0",
            cap_add=list(TEMPLATE_CAPABILITIES),
            mem_limit=memory,
            memswap_limit=memory,
            pids_limit=self.limits.pids * CONTAINER_SHARE,
            nano_cpus=int(cpus * 1e9),
        )
        return options
