"""Kernel behaviour beyond the conformance suite: errors a user meets, cleanup, introspection results."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from themisto_env.errors import (
    BackendUnavailableError,
    ConfigError,
    HelperError,
    InfrastructureError,
    IntrospectionRefused,
    SnapshotError,
    UnknownNameError,
)
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.models import SandboxLimits


def test_unknown_backend_suggests_the_nearest_name() -> None:
    with pytest.raises(ConfigError, match="did you mean 'docker'"):
        Kernel("dockr")


def test_close_is_idempotent_and_removes_the_run_directory(snapshot_dir: Path) -> None:
    kernel = Kernel("local", snapshot_dir=snapshot_dir).start()
    run_dir = kernel.run_dir
    assert (run_dir / "kernel.json").exists()
    kernel.close()
    kernel.close()
    assert not run_dir.exists()
    assert not kernel.is_alive()
    with pytest.raises(InfrastructureError, match="not started"):
        kernel.execute("1")


def test_restore_of_an_unknown_digest_names_it(local_kernel: Kernel) -> None:
    with pytest.raises(SnapshotError, match="no snapshot 0123456789ab"):
        local_kernel.snapshots.restore("0123456789abcdef" * 4)


def test_error_result_carries_name_value_and_counter(local_kernel: Kernel) -> None:
    result = local_kernel.execute("{}['missing']")
    assert result.status == "error"
    assert result.error is not None and result.error["ename"] == "KeyError"
    assert result.execution_count == 1
    assert result.text() == "KeyError: 'missing'"


def test_introspection_reports_variables(local_kernel: Kernel) -> None:
    local_kernel.execute(
        "import numpy as np, pandas as pd\n"
        "arr = np.zeros((100, 10))\n"
        "frame = pd.DataFrame({'city': ['a', 'b', 'c'], 'n': [1, 2, 3]})\n"
        "def area(r):\n    '''Area of a circle.'''\n    return 3.14159 * r * r\n"
    )
    listing = local_kernel.introspect.list_variables()
    by_name = {row.name: row for row in listing.variables}
    assert set(by_name) == {"arr", "frame", "area"}, "modules are not variables"
    assert listing.total == listing.shown == 3
    assert by_name["arr"].shape == (100, 10) and by_name["arr"].size_bytes >= 8000
    assert by_name["frame"].type == "pandas.DataFrame" and by_name["frame"].length == 3
    assert local_kernel.introspect.list_variables(limit=1).variables == listing.variables[:1]

    detail = local_kernel.introspect.inspect_variable("arr")
    assert detail.dtype == "float64" and detail.shape == (100, 10)
    assert set(local_kernel.introspect.inspect_variable("frame").dtypes or {}) == {"city", "n"}
    head = local_kernel.introspect.dataframe("frame", "head", n=2).text
    assert "city" in head and "b" in head and "c" not in head.split("\n", 3)[-1]
    assert "non-null" in local_kernel.introspect.dataframe("frame", "info").text
    assert "Area of a circle" in local_kernel.introspect.source("area").source
    memory = local_kernel.introspect.memory()
    assert memory.kernel_rss_bytes is not None and memory.kernel_rss_bytes > 10_000_000
    assert memory.variables[0].name == "arr"
    assert set(local_kernel.introspect.variable_sizes()) == {"arr", "frame", "area"}


def test_introspection_refusals_are_typed(local_kernel: Kernel) -> None:
    local_kernel.execute("import numpy as np\narr = np.zeros(3)\nframe = arr.tolist()\nclass Cell:\n    pass")
    with pytest.raises(UnknownNameError, match=r"^no variable named 'fram' in the kernel\. Did you mean frame") as err:
        local_kernel.introspect.inspect_variable("fram")
    assert err.value.name == "fram" and err.value.suggestions[0] == "frame" and err.value.function == "inspect_variable"
    with pytest.raises(UnknownNameError) as err:
        local_kernel.introspect.source("zzz")
    assert err.value.suggestions == () and "Did you mean" not in str(err.value)
    with pytest.raises(IntrospectionRefused, match=r"'arr' is a numpy\.ndarray, not a pandas DataFrame") as refused:
        local_kernel.introspect.dataframe("arr")
    assert not isinstance(refused.value, UnknownNameError) and refused.value.name == "arr"
    with pytest.raises(IntrospectionRefused, match="no source available for 'Cell'"):
        local_kernel.introspect.source("Cell")
    assert local_kernel.is_alive() and local_kernel.restarts == 0


def test_a_helper_that_runs_past_the_limit_is_interrupted_not_restarted(snapshot_dir: Path) -> None:
    with Kernel("local", limits=SandboxLimits(timeout_s=1), snapshot_dir=snapshot_dir) as kernel:
        kernel.execute("import time\nclass Slow:\n    def __repr__(self):\n        time.sleep(30)\nslow = Slow()")
        pid, before = kernel.launcher.pid(), kernel.introspect.namespace_state()
        with pytest.raises(HelperError, match="TimeoutError: it ran past 1 s and was interrupted") as err:
            kernel.introspect.inspect_variable("slow")
        assert not isinstance(err.value, InfrastructureError)
        assert kernel.launcher.pid() == pid and kernel.restarts == 0
        assert kernel.introspect.namespace_state() == before


def test_long_repr_is_bounded(local_kernel: Kernel) -> None:
    local_kernel.execute("big = list(range(100_000))\ntext = 'x' * 50_000")
    assert len(local_kernel.introspect.inspect_variable("big", max_chars=500).repr) < 600
    assert len(local_kernel.introspect.inspect_variable("text", max_chars=500).repr) < 600


def test_bwrap_kernel_starts_from_a_venv_under_tmp(tmp_path: Path, bwrap_backend: None) -> None:
    """bwrap gives the kernel a private /tmp; a Python that lives under /tmp must still be visible."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # It sees this interpreter's packages (a system Python's or a venv's, with their .pth files: the
    # editable install), as --system-site-packages would for a system Python.
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", ask], capture_output=True, text=True, check=True)
    outer = [p for p in site.getsitepackages() if Path(p).is_dir()]
    # (one line, run by exec in site.addpackage: a comprehension there would not see `site`)
    Path(purelib.stdout.strip(), "outer.pth").write_text(f"import site; list(map(site.addsitedir, {outer!r}))\n")
    code = (
        "from themisto_env.sandbox.kernel.core import Kernel\n"
        "with Kernel('bwrap') as k:\n"
        "    print(k.execute('21 * 2').outputs[0]['data']['text/plain'])"
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "42", done.stderr[-2000:]


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal concerns bwrap started by root")
def test_bwrap_refuses_root_in_one_line_pointing_to_docker(snapshot_dir: Path) -> None:
    """bwrap started by root would map the kernel's user to root outside (it could read /root, the
    host's cache, every root-only file): it must refuse, not pretend to isolate."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    kernel = Kernel("bwrap", snapshot_dir=snapshot_dir)
    with pytest.raises(BackendUnavailableError) as refused:
        kernel.start()
    message = str(refused.value)
    assert "\n" not in message and "root" in message and "docker" in message
    assert kernel._process._run_dir is None, "the refused kernel left its run directory behind"


def test_known_sizes_are_reported_as_given_and_not_measured(local_kernel: Kernel) -> None:
    local_kernel.execute(
        "class Unmeasurable:\n"
        "    @property\n"
        "    def __dict__(self):\n"
        "        raise RuntimeError('measured')\n"
        "u = Unmeasurable()\nbig = list(range(10_000))"
    )
    measured = {v.name: v.size_bytes for v in local_kernel.introspect.list_variables().variables}
    assert measured["u"] == 0 and measured["big"] > 10_000, "a deep size that raises is 0, one that works is real"
    known = {"u": 123, "big": 7}
    listed = {v.name: v.size_bytes for v in local_kernel.introspect.list_variables(known=known).variables}
    assert listed["u"] == 123 and listed["big"] == 7
    report = local_kernel.introspect.memory(top=10, known=known)
    sizes = {v.name: v.size_bytes for v in report.variables}
    assert sizes["big"] == 7 and sizes["u"] == 123
    assert report.variables_total_bytes == sum(sizes.values())
