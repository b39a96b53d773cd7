"""A kernel template's process: the launchers that start the template's program instead of ipykernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from themisto_env.sandbox.backends.local import BwrapLauncher, LocalLauncher
from themisto_env.sandbox.kernel.launcher import KernelLauncher
from themisto_env.sandbox.template.docker import DockerTemplateLauncher
from themisto_env.sandbox.template.zygote import ISOLATE_VARIABLE, PROGRAM_FILE

__all__ = [
    "ISOLATED_COPIES",
    "REQUEST_TIMEOUT_S",
    "TEMPLATE_LAUNCHERS",
    "BwrapTemplateLauncher",
    "LocalTemplateLauncher",
    "TemplateProgram",
]

#: Backends whose copies each take a uid of their own after the fork (copies of one template are isolated
#: from each other: model-written code may be forked there). ``bwrap`` copies of model-written code isolate
#: themselves too, in namespaces of their own, with no uid to give (see `BwrapTemplateLauncher`).
ISOLATED_COPIES = ("docker",)
#: How long a request to a template may take (a fork answers in milliseconds; a derive loads a snapshot).
REQUEST_TIMEOUT_S = 30.0


class TemplateProgram:
    """A launcher whose process runs the template's program instead of ipykernel."""

    config: dict[str, Any]

    def program(self, connection_file: Path) -> list[str]:
        # the program, run by path with the kernel's Python, as written into the run directory (write_program)
        return [str(connection_file.parent / PROGRAM_FILE), json.dumps(self.config)]


class LocalTemplateLauncher(TemplateProgram, LocalLauncher):
    """A ``local`` template's process."""


class BwrapTemplateLauncher(TemplateProgram, BwrapLauncher):
    """A ``bwrap`` template's process (in a sandbox of its own, as a bwrap kernel).

    A template for model-written code (the store hidden from it: ``store_access="copy"``) makes each kernel it
    forks isolate itself right after the fork (``_isolate_copy`` in `themisto_env.sandbox.template.zygote`):
    user, pid, mount, network and IPC namespaces of its own nested in the sandbox's, its template's run
    directory hidden but for its own folders, rlimits for its processes and memory (``limits.pids`` and
    ``limits.memory_mb``: the template's, set here, or the kernel's own, which the fork request carries), no
    capability left, and an init of its own that reaps its orphans.
    """

    def environment(self, connection_file: Path) -> dict[str, str]:
        environment = super().environment(connection_file)
        environment.pop(ISOLATE_VARIABLE, None)
        if self.hidden_dirs:  # the store hidden: kernels for model-written code
            environment[ISOLATE_VARIABLE] = json.dumps(
                {
                    "nproc": self.limits.pids,
                    "memory_bytes": self.limits.memory_mb << 20,
                    "hide": sorted({str(connection_file.parent), *map(str, self.shared_dirs)}),
                }
            )
        return environment


#: A template's launcher by backend.
TEMPLATE_LAUNCHERS: dict[str, type[KernelLauncher]] = {
    "local": LocalTemplateLauncher,
    "bwrap": BwrapTemplateLauncher,
    "docker": DockerTemplateLauncher,
}
