"""Where kernels go on Ray: :class:`RayPlacement`, the env option ``ray`` (see
:mod:`~themisto_env.sandbox.ray.kernel`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.sandbox.ray.cluster import LOCAL

__all__ = ["RayPlacement"]


class RayPlacement(BaseModel):
    """Where an env's kernels run on Ray (the env option ``ray``; a bare address string means the defaults).

    Attributes:
        address: ``local`` (a Ray instance on this machine), ``auto`` (the cluster this machine joined),
            ``HOST:6379`` or ``ray://HOST:10001``: the same addresses as ``themisto run --ray``.
        num_cpus: CPUs each kernel's actor reserves in Ray's accounting (default a quarter: a kernel mostly
            waits between cells, and an env holds two or three: its own, a warm one, a disposable one).
        memory_mb: Memory each kernel's actor reserves (None: none reserved; the kernel's own limits
            still apply on isolating backends).
        resources: Custom Ray resources each kernel's actor needs, e.g. ``{"kernels": 1}`` with CPU nodes
            started by ``ray start --resources '{"kernels": 16}'``: kernels then go only there, never to
            the trainer's GPU node.
        scheduling: ``SPREAD`` spreads kernels over the nodes; ``DEFAULT`` lets Ray pack them.
        snapshot_dir: The snapshot store on the kernels' nodes (None: the same path as the owner's store,
            which on one machine or a shared folder is the same store).
        start_timeout_s: How long to wait for a node to take a new kernel's actor.
    """

    model_config = ConfigDict(extra="forbid")

    address: str = LOCAL
    num_cpus: float = Field(0.25, ge=0)
    memory_mb: int | None = Field(None, ge=1)
    resources: dict[str, float] = Field(default_factory=dict)
    scheduling: Literal["SPREAD", "DEFAULT"] = "SPREAD"
    snapshot_dir: str | None = None
    start_timeout_s: float = Field(120.0, gt=0)
