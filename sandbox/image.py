"""The kernel container image: its package set, its name, and how to build it with no registry.

The image is named ``themisto-kernel:<tag>``, where the tag is a hash of the package set and of the
recipe (``image/Dockerfile``): a changed package set is a new image, never a stale one. The default
package set is the *host's* exact versions of
:data:`~themisto_env.sandbox.image_spec.DEFAULT_PACKAGES` and of everything they depend on, because a
dill snapshot only loads under the versions that wrote it.

There is one recipe, ``image/Dockerfile``, and two ways to feed it:

* with a registry, ``docker build`` of the context from
  :func:`~themisto_env.sandbox.image_spec.write_context` (base ``python:3.11-slim-bookworm``, pip reaches
  the index);
* with none (:func:`~themisto_env.sandbox.image_build.build_image`, the default): wheels are downloaded
  on the host (``pip download --only-binary=:all:``), a minimal Debian is made with ``debootstrap`` and
  ``docker import``-ed as the base, and the same Dockerfile is built from it with ``pip install
  --no-index`` and no network.

Downloaded wheels, the debootstrap tarball and the imported base image are cached (see
:func:`~themisto_env.sandbox.image_spec.cache_dir`), so a rebuild after a package change skips
debootstrap.

This module is the image's command line (``python -m themisto_env.sandbox.image --help``); each name has
its home where the work is done: :mod:`~themisto_env.sandbox.image_spec` (the package set, the name, the
build context), :mod:`~themisto_env.sandbox.image_build` (building), :mod:`~themisto_env.sandbox.debootstrap`
(the Debian base) and :mod:`~themisto_env.sandbox.docker_engine` (the engine's client and images).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.image_build import build_image
from themisto_env.sandbox.image_spec import default_image, default_spec, write_context

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m themisto_env.sandbox.image {build,name,context}``."""
    parser = argparse.ArgumentParser(
        prog="python -m themisto_env.sandbox.image",
        description="Build, name or write the build context of the themisto-env kernel image.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the kernel image unless it exists; print its name")
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    build.add_argument("--method", choices=["debootstrap", "dockerfile"], default="debootstrap")
    sub.add_parser("name", help="print the default kernel image name")
    context = sub.add_parser("context", help="write a docker build context for the default image")
    context.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build_image(force=args.force, method=args.method))
        elif args.command == "name":
            print(default_image())
        else:
            write_context(default_spec(), args.dest)
            print(f"docker build -t {default_image()} {args.dest}")
    except BackendUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
