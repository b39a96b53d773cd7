"""The public API: each package's ``__all__`` pinned, every name importable, importing cheap and quiet.

A package's face is its ``__init__.pyi``: a line per public name, ``from .module import Name as Name``
(``lazy_loader.attach_stub`` in ``__init__.py`` makes ``__getattr__``, ``__dir__`` and ``__all__`` from it;
type checkers read it as the package). A change to a package's public names changes this file on purpose
(and the docs and every caller with it); tests/test_one_home.py checks each line names the module that
defines the name.
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
    # where code starts: the version, the exception tree's roots, and verifiers' taskset and harness (verifiers 0.4
    # finds a taskset by the package's `__all__`: `vf-eval themisto-env` imports `themisto_env`)
    "themisto_env": [
        "ConfigError",
        "DataError",
        "InfrastructureError",
        "ThemistoError",
        "ThemistoHarness",
        "ThemistoTaskset",
        "__version__",
    ],
    "themisto_env.data": [
        "Recorder",
        "Sample",
        "SampleRule",
        "Session",
        "SplitRule",
        "Step",
        "Trajectory",
        "agreement",
        "make_samples",
        "read_sessions",
        "read_trajectories",
    ],
    "themisto_env.build": ["build_dataset"],
    "themisto_env.state": ["StateProvider", "StateReport"],
    "themisto_env.replay": ["Dataset"],
    "themisto_env.scoring": [
        "ExecutionScore",
        "RewardWeights",
        "SampleScore",
        "execution_score",
        "pass_at_k",
        "reward",
        "score_sample",
    ],
    "themisto_env.env": [
        "Action",
        "EnvConfig",
        "Episode",
        "EpisodeRecord",
        "Prediction",
        "ThemistoEnv",
    ],
    "themisto_env.env.tools": [
        "HistoryItem",
        "ObservationTool",
        "SUBMIT",
        "TOOLS",
        "TOOL_NAMES",
        "TRY_CELL",
        "ToolCall",
        "ToolContext",
        "ToolResult",
        "ToolSpec",
        "langchain_tools",
        "run_tool",
        "task_tools",
        "tool_function",
        "tool_method",
    ],
    "themisto_env.run": [
        "ResultRow",
        "RunConfig",
        "read_results",
        "run",
    ],
    "themisto_env.bridges": [
        "ThemistoSandbox",
        "themisto",
    ],
    "themisto_env.bridges.openenv": [
        "ThemistoAction",
        "ThemistoEnvClient",
        "ThemistoObservation",
        "ThemistoState",
        "create_server_app",
        "serve",
    ],
    "themisto_env.bridges.rl": [
        "ExecutionReward",
        "MetricReward",
        "SharedStates",
        "ThemistoToolEnv",
        "export_dataset",
        "tool_dataset",
    ],
    "themisto_env.metrics": [
        "API_SEQUENCE_METRICS",
        "METRICS",
        "Score",
        "aggregate",
        "api_sequence",
        "api_sequence_score",
        "chrf",
        "compare_paired",
        "estimate_means",
        "exact_match",
        "rouge_l",
        "score",
    ],
    "themisto_env.agents": [
        "Agent",
        "AgentUsage",
        "BaseAgent",
        "make_agent",
        "parse_history",
        "register_agent",
    ],
    "themisto_env.sandbox": [
        "ExecutionResult",
        "Kernel",
        "KernelLauncher",
        "KernelLike",
        "KernelSpec",
        "KernelTemplate",
        "SandboxLimits",
    ],
    # the in-kernel helper's host side: the names the host shares with it
    "themisto_env.sandbox.kernel.helper": [
        "FINGERPRINT_VERSION",
        "OPTIONS_KEY",
        "helper_source",
        "value_fingerprint",
    ],
}

#: At most this many public names over all faces (issue 46: a small surface).
MOST_NAMES = 100

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


def test_the_surface_is_small_and_each_name_has_one_face() -> None:
    """About a hundred public names in all, and no name on two faces (``ToolCall`` is
    ``themisto_env.env.tools``', ``Dataset`` ``themisto_env.replay``'s, ``Trajectory`` ``themisto_env.data``'s)."""
    names = [name for package in PUBLIC for name in importlib.import_module(package).__all__]
    assert len(names) <= MOST_NAMES
    assert sorted({name for name in names if names.count(name) > 1}) == []


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
    """A lazy package answers a wrong name with an AttributeError (so hasattr and getattr defaults work)."""
    import themisto_env.data

    with pytest.raises(AttributeError, match=r"themisto_env\.data.*Trajectroy"):
        _ = themisto_env.data.Trajectroy
    assert not hasattr(themisto_env, "no_such_name")


def test_a_name_is_not_shadowed_by_its_module() -> None:
    """``themisto_env.data.agreement`` is the function even when its module ``data/agreement.py`` was imported
    first (which sets the package's attribute to the module)."""
    code = (
        "import themisto_env.data.agreement, themisto_env.data as data; "
        "from themisto_env.data import agreement; print(callable(agreement), callable(data.agreement))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_each_public_name_is_listed_once(package: str) -> None:
    """The face lists each name once, on a line of its own in ``__init__.pyi`` (``from .module import Name as
    Name``); ``__init__.py`` imports no name itself and ``__all__`` is the stub's names."""
    init = Path(importlib.import_module(package).__file__ or "")
    stub = ast.parse(init.with_suffix(".pyi").read_text(encoding="utf-8"))
    listed: list[str] = []
    for node in stub.body[1:]:  # after the docstring: only the names' lines
        assert isinstance(node, ast.ImportFrom) and node.level == 1 and len(node.names) == 1, ast.unparse(node)
        alias = node.names[0]
        assert alias.asname == alias.name, f"{init}i: {ast.unparse(node)} (a re-export says `as {alias.name}`)"
        listed.append(alias.name)
    assert len(listed) == len(set(listed)), f"{init}i lists a name twice"
    assert sorted(listed) == sorted(importlib.import_module(package).__all__)
    body = ast.parse(init.read_text(encoding="utf-8")).body
    imports = [ast.unparse(n) for n in body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert imports == ["from __future__ import annotations", "import lazy_loader"], f"{init}: {imports}"


def test_importing_every_package_is_cheap_and_quiet() -> None:
    """Importing all packages imports no heavy dependency and none of their modules, starts no thread and adds
    no logging handler."""
    code = f"""
import json, logging, sys, threading
before = len(logging.getLogger().handlers)
for package in {sorted(PUBLIC)!r}:
    __import__(package)
print(json.dumps({{
    "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules),
    "threads": threading.active_count(),
    "handlers": len(logging.getLogger().handlers) - before,
    "modules": sorted(m for m in sys.modules if m.startswith("themisto_env")),
}}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # the packages themselves (and the packages holding them) and none of their modules: a name is imported when
    # it is first used
    packages = {package.rsplit(".", depth)[0] for package in PUBLIC for depth in range(package.count(".") + 1)}
    assert json.loads(result.stdout) == {"heavy": [], "threads": 1, "handlers": 0, "modules": sorted(packages)}
