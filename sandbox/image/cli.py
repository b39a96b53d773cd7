"""The kernel image's command line: ``python -m themisto_env.sandbox.image {build,name,context}``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.image.build import build_image
from themisto_env.sandbox.image.spec import default_image, default_spec, write_context

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
