"""Data that crosses the sandbox boundary: limits in, execution results and snapshot references out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.sandbox.rendering import render_outputs

ExecutionStatus = Literal["ok", "error", "timeout"]


class SandboxLimits(BaseModel):
    """Limits applied to a kernel. The local backend enforces only the per-execution ones.

    Attributes:
        timeout_s: Wall-clock limit of one execution; on expiry the kernel is interrupted, and restarted
            if it does not come back within ``interrupt_grace_s``.
        interrupt_grace_s: How long an interrupted kernel has to become idle again.
        output_limit_bytes: Cap on the text of all outputs of one execution; the rest is dropped and a
            marker says how much.
        image_limit_bytes: Images past that cap kept anyway, up to this much per execution (0: dropped);
            a build sets it and moves them into its dataset's file store.
        memory_mb: Container memory limit (docker backend); swap is not allowed beyond it. A docker copy
            forked from a template: what its code may allocate beyond its size at its first cell (its kernel
            started, its state restored), as ``RLIMIT_DATA`` (docs/sandboxes.md);
            its template's container holds 4 copies' worth.
        cpus: Container CPU quota (docker backend).
        pids: Container process limit (docker backend); a docker copy's own ``RLIMIT_NPROC`` (its processes
            and threads), its template's container holding 4 copies' worth.
        start_timeout_s: How long a kernel has to become ready.
        workdir_mb: The most a kernel's working folder may hold (the folder copied in, and what its cells
            leave there when it is recorded).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(60.0, gt=0)
    interrupt_grace_s: float = Field(5.0, gt=0)
    output_limit_bytes: int = Field(256 * 1024, ge=1024)
    image_limit_bytes: int = Field(0, ge=0)
    memory_mb: int = Field(2048, ge=64)
    cpus: float = Field(1.0, gt=0)
    pids: int = Field(256, ge=16)
    start_timeout_s: float = Field(30.0, gt=0)
    workdir_mb: float = Field(100.0, gt=0)


class ExecutionResult(BaseModel):
    """What one cell execution produced.

    Attributes:
        status: ``ok``, ``error`` (the cell raised) or ``timeout`` (it ran past the limit and was
            interrupted).
        outputs: nbformat v4 output dicts in order (stream, execute_result, display_data, error); adjacent
            stream outputs of the same name are merged, as a notebook shows them.
        execution_count: The kernel's counter for this cell (None for silent executions).
        duration_s: Wall-clock time from request to idle, as seen by the host.
        memory_bytes: Resident memory of the kernel process after the execution, if it could be read.
        truncated: Whether outputs were cut at the output cap.
        kernel_restarted: Whether the kernel had to be restarted after a timeout (its state is gone).
        fingerprint: The namespace fingerprint right after the cell, when asked for and the cell did not
            raise (taken in the same request: no extra round trip).
    """

    model_config = ConfigDict(extra="forbid")

    status: ExecutionStatus
    outputs: list[dict[str, Any]] = Field(default_factory=list)
    execution_count: int | None = None
    duration_s: float = 0.0
    memory_bytes: int | None = None
    truncated: bool = False
    kernel_restarted: bool = False
    fingerprint: dict[str, str] | None = None

    @property
    def error(self) -> dict[str, Any] | None:
        """The error output, if the cell raised."""
        return next((o for o in self.outputs if o.get("output_type") == "error"), None)

    def text(self) -> str:
        """The text a person sees, rendered by `themisto_env.sandbox.rendering.render_outputs`."""
        return render_outputs(self.outputs)


class SnapshotInfo(BaseModel):
    """A content-addressed snapshot of a kernel's user namespace.

    Attributes:
        digest: sha256 of the snapshot file's bytes; the file is ``<store>/<digest[:2]>/<digest>.dill``.
        size_bytes: Size of the file.
        names: The names saved.
        skipped: Names left out, with the reason (unpicklable objects such as generators).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str = Field(pattern=r"^[0-9a-f]{64}$")  # a kernel's answer names a host path: nothing else
    size_bytes: int
    names: list[str]
    skipped: dict[str, str] = Field(default_factory=dict)


class RestoreResult(BaseModel):
    """What a restore loaded.

    Attributes:
        names: The names restored.
        fingerprint: The namespace fingerprint right after the restore (taken in the same request).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[str]
    fingerprint: dict[str, str]
