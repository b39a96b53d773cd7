"""A kernel template's process: the launchers that start the template's program instead of ipykernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from themisto_env.sandbox.backends.local import BwrapLauncher, LocalLauncher
from themisto_env.sandbox.kernel.launcher import KernelLauncher
from themisto_env.sandbox.template.docker import DockerTemplateLauncher
from themisto_env.sandbox.template.zygote import PROGRAM_FILE

__all__ = [
    "ISOLATED_COPIES",
    "REQUEST_TIMEOUT_S",
    "TEMPLATE_LAUNCHERS",
    "BwrapTemplateLauncher",
    "LocalTemplateLauncher",
    "TemplateProgram",
]

#: Backends whose copies each take a uid of their own after the fork (copies of one template are isolated
#: from each other: model-written code may be forked there).
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
    """A ``bwrap`` template's process (in a sandbox of its own, as a bwrap kernel)."""


#: A template's launcher by backend.
TEMPLATE_LAUNCHERS: dict[str, type[KernelLauncher]] = {
    "local": LocalTemplateLauncher,
    "bwrap": BwrapTemplateLauncher,
    "docker": DockerTemplateLauncher,
}
