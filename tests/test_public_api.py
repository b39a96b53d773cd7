"""The public API: each package's ``__all__`` pinned, every name importable, importing cheap and quiet.

A change to a package's public names changes this file on purpose (and README and every caller with it).
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

PUBLIC: dict[str, list[str]] = {
    "themisto_env": [
        "ActionError",
        "BackendUnavailableError",
        "ConfigError",
        "DataError",
        "Dataset",
        "EnvConfig",
        "InfrastructureError",
        "KernelDiedError",
        "KernelStartError",
        "KernelTimeoutError",
        "Prediction",
        "ProviderError",
        "Sample",
        "SampleRule",
        "SnapshotError",
        "ThemistoEnv",
        "ThemistoError",
        "ThemistoHarness",
        "ThemistoTaskset",
        "ToolCall",
        "Trajectory",
        "__version__",
    ],
    "themisto_env.data": [
        "TASKS",
        "Agreement",
        "AgreementKind",
        "JuneEvent",
        "Manifest",
        "RecordedExecution",
        "Recorder",
        "Sample",
        "SampleRule",
        "Session",
        "SplitRule",
        "Step",
        "TaskName",
        "Trajectory",
        "agreement",
        "dataset_info",
        "episode_starts",
        "iter_trajectories",
        "make_samples",
        "read_events",
        "read_notebook_session",
        "read_sessions",
        "read_trajectories",
        "samples_by_trajectory",
        "write_events",
    ],
    "themisto_env.replay": [
        "BuildReport",
        "CodeRun",
        "Dataset",
        "DisposableKernels",
        "KernelEnvironmentRecord",
        "KernelEnvironmentSpec",
        "StateReport",
        "TrajectoryKernel",
        "build_dataset",
        "bundled_dataset_dir",
        "dataset_kernel_environment",
        "list_kernel_environments",
        "resolve_dataset",
        "use_kernel_environment",
    ],
    "themisto_env.scoring": ["ExecutionScore", "execution_score", "pass_at_k", "summarize_draws"],
    "themisto_env.env": [
        "Action",
        "EnvConfig",
        "Prediction",
        "ThemistoEnv",
        "ToolCall",
        "encode_action",
        "parse_action",
    ],
    "themisto_env.env.tools": [
        "TOOLS",
        "TOOL_NAMES",
        "HistoryItem",
        "ObservationStructuredTool",
        "ObservationTool",
        "OnCall",
        "ToolCall",
        "ToolContext",
        "ToolError",
        "ToolResult",
        "describe_tools",
        "langchain_tools",
        "nearest_tool",
        "run_tool",
        "signature",
    ],
    "themisto_env.run": [
        "ResultRow",
        "RunConfig",
        "compare_runs",
        "load_run_config",
        "read_results",
        "run",
        "write_report",
        "write_view",
    ],
    "themisto_env.bridges": ["ThemistoSandbox", "themisto"],
    "themisto_env.bridges.rl": [
        "ExecutionReward",
        "MetricReward",
        "SharedStates",
        "ThemistoToolEnv",
        "batch_actions",
        "completion_text",
        "export_dataset",
        "export_samples",
        "make_vector_env",
        "observation_prompt",
        "tool_dataset",
        "unbatch_observations",
    ],
    "themisto_env.metrics": [
        "API_SEQUENCE_METRICS",
        "METRICS",
        "ApiSequenceScore",
        "CorpusScore",
        "Estimate",
        "PairedComparison",
        "PairedDifference",
        "RewardWeights",
        "Score",
        "aggregate",
        "api_sequence",
        "api_sequence_score",
        "chrf",
        "compare_paired",
        "estimate_means",
        "exact_match",
        "normalize_for_exact_match",
        "reward",
        "rouge_l",
        "rouge_tokens",
        "score",
        "score_many",
    ],
    "themisto_env.agents": [
        "AGENTS",
        "Action",
        "Agent",
        "AgentUsage",
        "BaseAgent",
        "HistoryCell",
        "make_agent",
        "parse_history",
        "register_agent",
    ],
    "themisto_env.sandbox": [
        "BACKENDS",
        "ExecutionResult",
        "Kernel",
        "KernelLauncher",
        "SandboxLimits",
        "SnapshotInfo",
        "launcher_class",
    ],
}

#: Names whose module needs an optional extra: importable only where it is installed.
NEEDS_EXTRA = {
    ("themisto_env.bridges", "ThemistoSandbox"): "inspect_ai",
    ("themisto_env.bridges", "themisto"): "inspect_ai",
    ("themisto_env", "ThemistoHarness"): "verifiers",  # a verifiers 0.4 environment: `vf-eval themisto-env`
    ("themisto_env", "ThemistoTaskset"): "verifiers",
}

#: What ``import`` of every package must not pull in (heavy, or a side effect of its own).
HEAVY = ("torch", "trl", "transformers", "datasets", "ray", "inspect_ai", "langchain_core", "docker", "IPython")


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_is_pinned(package: str) -> None:
    """``__all__`` is exactly the pinned list, without duplicates."""
    exported = importlib.import_module(package).__all__
    assert len(exported) == len(set(exported)), f"{package}.__all__ repeats a name"
    assert sorted(exported) == sorted(PUBLIC[package])


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_public_name_imports(package: str) -> None:
    """``from package import name`` works for every pinned name (optional extras where installed)."""
    module = importlib.import_module(package)
    for name in PUBLIC[package]:
        extra = NEEDS_EXTRA.get((package, name))
        if extra and importlib.util.find_spec(extra) is None:
            continue
        assert getattr(module, name) is not None, f"{package}.{name}"
        assert name in dir(module)


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A lazy package answers a wrong name as a module does (so hasattr and getattr defaults work)."""
    import themisto_env.data

    with pytest.raises(AttributeError, match=r"themisto_env\.data.*no attribute 'Trajectroy'"):
        _ = themisto_env.data.Trajectroy
    assert not hasattr(themisto_env, "no_such_name")


def test_lazy_names_match_the_type_checking_imports() -> None:
    """In each lazy ``__init__``, the names imported under ``TYPE_CHECKING`` are the names served at run time."""
    for package in PUBLIC:
        path = Path(importlib.import_module(package).__file__ or "")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typed: set[tuple[str, str]] = set()
        served: set[tuple[str, str]] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for child in node.body:
                    assert isinstance(child, ast.ImportFrom) and child.module
                    typed |= {(child.module, alias.name) for alias in child.names}
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
                exports = ast.literal_eval(node.args[1])
                served |= {(module, name) for module, names in exports.items() for name in names}
        assert typed == served, f"{path}: TYPE_CHECKING imports and lazy_exports differ"


def test_importing_every_package_is_cheap_and_quiet() -> None:
    """Importing all packages imports no heavy dependency, starts no thread and adds no logging handler."""
    code = f"""
import json, logging, sys, threading
before = len(logging.getLogger().handlers)
for package in {sorted(PUBLIC)!r}:
    __import__(package)
print(json.dumps({{
    "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules),
    "threads": threading.active_count(),
    "handlers": len(logging.getLogger().handlers) - before,
}}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout) == {"heavy": [], "threads": 1, "handlers": 0}
