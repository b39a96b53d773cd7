"""Images named by what they hold: the kernel image's tag covers every installed package the kernel's packages
need (the issue's asttokens, executing, pure-eval, pyparsing among them), another package set on the same
machine gets another image and another bundled-data folder, and the built image holds exactly the set its
tag names (nothing pip chose on its own)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from themisto_env.sandbox.image.build import unpinned_wheels
from themisto_env.sandbox.image.spec import ImageSpec, default_image, default_spec

#: Installed dependencies of the kernel's packages that a tag once missed (the served kernel then "lacked" them).
REPORTED = ("asttokens", "executing", "pure-eval", "pyparsing")


def _pins(spec: ImageSpec) -> dict[str, str]:
    return {canonicalize_name(p.split("==")[0]): p.split("==")[1] for p in (*spec.packages, *spec.constraints)}


def test_the_kernel_tag_pins_every_installed_dependency_at_this_pythons_version() -> None:
    pins = _pins(default_spec())
    for name in REPORTED:
        assert name in pins, f"{name} is a dependency of ipykernel or matplotlib: the tag must name it"
    for name, version in pins.items():
        assert importlib.metadata.version(name) == version, name


PROBE = """
import json
from themisto_env.replay.resolve import bundled_dataset_dir
from themisto_env.sandbox.image.spec import default_image, default_spec
spec = default_spec()
print(json.dumps({"image": default_image(), "pins": sorted(spec.constraints), "data": bundled_dataset_dir().name}))
"""


def _probe(extra_path: Path | None) -> dict[str, object]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(extra_path), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_another_package_set_gets_its_own_kernel_image_and_bundled_data(tmp_path: Path) -> None:
    """A Python where one of the kernel's dependencies is at another version (here asttokens, found first on
    the path): another image tag, another bundled-data folder; this Python's are unchanged."""
    other = "99.0.1"
    dist_info = tmp_path / f"asttokens-{other}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: asttokens\nVersion: {other}\n")
    here, there = _probe(None), _probe(tmp_path)
    assert here["image"] == default_image()
    assert f"asttokens=={other}" in there["pins"] and f"asttokens=={other}" not in here["pins"]
    assert there["image"] != here["image"], "two package sets, two kernel images"
    assert there["data"] != here["data"], "two package sets, two bundled-data folders"


def test_wheels_the_spec_does_not_pin_are_named() -> None:
    spec = ImageSpec(packages=["dill==0.4.1"], constraints=["asttokens==3.0.2"])
    wheels = [
        Path("dill-0.4.1-py3-none-any.whl"),
        Path("asttokens-3.0.1-py3-none-any.whl"),  # another version than the pin
        Path("six-1.17.0-py2.py3-none-any.whl"),  # not pinned at all
    ]
    assert unpinned_wheels(spec, wheels) == ["asttokens==3.0.1", "six==1.17.0"]
    assert unpinned_wheels(spec, wheels[:1]) == []


def test_the_built_kernel_image_holds_exactly_what_its_tag_names(docker_engine: None) -> None:
    listing = "import importlib.metadata as m, json; print(json.dumps({d.name: d.version for d in m.distributions()}))"
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/opt/venv/bin/python", default_image(),
         "-c", listing],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    installed = {canonicalize_name(n): v for n, v in json.loads(done.stdout).items()}
    installed = {n: v for n, v in installed.items() if n not in ("pip", "setuptools", "wheel")}  # the venv's own
    assert installed == _pins(default_spec())


def test_bundled_data_written_with_other_versions_is_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundled-data folder of this package set whose snapshots another Python wrote (a package outside the
    kernel's set at another version) is built again here rather than served to a kernel that lacks them."""
    import themisto_env.build.builder as build
    from themisto_env.data.trajectory import Manifest
    from themisto_env.replay import resolve

    folder = tmp_path / "bundled-x-local"
    folder.mkdir()
    written = Manifest(backend="local", snapshots=True, sources=[], packages={"asttokens": "0.0.1"})
    (folder / "manifest.json").write_text(written.model_dump_json())
    (folder / "trajectories").mkdir()
    (folder / "trajectories" / "old.jsonl").write_text("{}\n")
    builds: list[list[str]] = []

    def fake_build(sources: object, out: Path, **kw: object) -> None:  # the real build takes minutes: its effect
        builds.append(sorted(p.name for p in Path(out).iterdir()))
        here = {"asttokens": importlib.metadata.version("asttokens")}
        (Path(out) / "manifest.json").write_text(written.model_copy(update={"packages": here}).model_dump_json())

    monkeypatch.setattr(resolve, "bundled_dataset_dir", lambda backend="local": folder)
    monkeypatch.setattr(build, "build_dataset", fake_build)
    monkeypatch.setattr(resolve, "_complete", lambda where, backend: True)
    monkeypatch.setattr(resolve, "_CHECKED", {})
    assert resolve.resolve_dataset(None, progress=False) == folder
    assert builds == [[".lock"]], "the old build is removed, then built again"
    monkeypatch.setattr(resolve, "_CHECKED", {})
    resolve.resolve_dataset(None, progress=False)
    assert len(builds) == 1, "written here: kept"
