"""What the ``themisto`` commands share: the console they print to and common options."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

console = Console()
"""Where the commands print (stdout)."""

Backend = Annotated[str, typer.Option("--backend", "-b", help="Kernel backend: local, bwrap or docker.")]
"""The ``--backend`` option."""

__all__ = ["Backend", "console"]
