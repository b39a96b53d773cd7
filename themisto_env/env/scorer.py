"""Scoring a prediction: `Scorer`, the scoring rule of an env config (docs/reward.md) and the
disposable kernels model-written code runs in (a prediction under the execution score, a ``try_cell`` candidate).

A scorer holds no episode and no live state: the gym env's prediction step, the TRL tool env and reward
functions, pass@k and the inspect scorer score through `Scorer.score`, which is
[`score_sample`][themisto_env.scoring.score_sample] under the config's rule with the sample's execution run.
Model-written code never runs in a state server's kernel: each run takes a disposable kernel brought to the
sample's state and discarded after (`themisto_env.state.copies`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from themisto_env.data.samples import Sample
from themisto_env.env.config import MODEL_CODE_TIMEOUT_S, EnvConfig, warn_unisolated
from themisto_env.env.kernel_spec import env_kernel_spec
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.scoring.rule import ScoringRule
from themisto_env.scoring.score import ExecutionRun, SampleScore, execution_run, score_sample
from themisto_env.state.copies import CodeRun, DisposableKernels
from themisto_env.state.provider import StateProvider

__all__ = ["Scorer"]


class Scorer:
    """The scoring rule of ``config`` and the disposable kernels its predictions and tried cells run in.

    Args:
        config: The options (the reward's weights, tool cost and execution score; the kernels' backend,
            limits, snapshot store, forking).
        dataset: The dataset the scored samples come from.
        spec: The kind of kernel (`KernelSpec`) the env built once for its parts; its kernels get copies of
            the snapshots (``store_access="copy"``). By default the config's and dataset's
            (`themisto_env.env.kernel_spec.env_kernel_spec`).

    No kernel starts until code has to run. Usable as a context manager (closed on exit).
    """

    def __init__(
        self,
        config: EnvConfig,
        dataset: Dataset,
        *,
        spec: KernelSpec | None = None,
        provider: StateProvider | None = None,
    ) -> None:
        self.config = config
        self.dataset = dataset
        self._owns = provider is None
        #: Where the disposable copies come from (the episode's served state's provider, or one of its own).
        self.provider = provider or StateProvider(dataset, spec or env_kernel_spec(config, dataset), serves=False)
        #: The kind of the disposable kernels (the store hidden, snapshots copied in).
        self.spec = self.provider.spec.with_access("copy")

    @property
    def rule(self) -> ScoringRule:
        """The options that enter the reward (weights, tool cost, execution score)."""
        return self.config.scoring_rule()

    @property
    def code_timeout_s(self) -> float:
        """The time limit of model-written code (a prediction, a tried cell)."""
        return min(self.config.kernel.limits.timeout_s, MODEL_CODE_TIMEOUT_S)

    def disposable_kernels(self) -> DisposableKernels:
        """The kernels model-written code runs in (`StateProvider.copies`, started on first use)."""
        return self.provider.copies()

    def execution_run(self, sample: Sample) -> ExecutionRun | None:
        """How a prediction of ``sample`` is run for the execution score (a disposable kernel in the state
        before its target step); None when the score does not apply."""
        if not self.config.execution_score or sample.task != "next-cell":
            return None
        trajectory = self.dataset.trajectories[sample.trajectory_id]
        return execution_run(self.disposable_kernels(), trajectory, sample.step, timeout_s=self.code_timeout_s)

    def try_code(self, sample: Sample) -> Callable[[str], CodeRun] | None:
        """The ``try_cell`` tool's runner at ``sample``'s state: a candidate cell run in a disposable kernel
        (never a state server's); None outside the next-cell task (running the cell would reveal the output)."""
        if self.config.task != "next-cell":
            return None
        trajectory, step = self.dataset.trajectories[sample.trajectory_id], sample.step

        def try_code(code: str) -> CodeRun:
            warn_unisolated(self.config.backend, "the try_cell tool")
            return self.disposable_kernels().run(trajectory, step, code, timeout_s=self.code_timeout_s)

        return try_code

    def score(
        self,
        sample: Sample,
        text: str,
        *,
        tools_used: int = 0,
        faults: Sequence[str] = (),
        state_mismatch: str | None = None,
    ) -> SampleScore:
        """The score of a prediction of ``sample``: [`score_sample`][themisto_env.scoring.score_sample] under this
        rule, with the sample's execution run (when the execution score applies).

        Args:
            sample: The sample predicted.
            text: The prediction, as it is scored.
            tools_used: The tool calls made for it (each costs ``rule.tool_cost``).
            faults: Infrastructure failures met while serving the sample or answering its tools (unscored).
            state_mismatch: How the served state differed from the recording (unscored), if it did.

        Raises:
            BackendUnavailableError: The backend went away while running the prediction.
        """
        return score_sample(
            text,
            sample.target,
            task=sample.task,
            rule=self.rule,
            tools_used=tools_used,
            execution=self.execution_run(sample),
            faults=faults,
            state_mismatch=state_mismatch,
        )

    def close(self) -> None:
        """Close the provider this scorer made (one given to it stays open). Idempotent."""
        if self._owns:
            self.provider.close()

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
