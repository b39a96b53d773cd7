"""The kernel container image: its package set, its name, and how to build it with no registry.

The image is named ``themisto-kernel:<tag>``, where the tag is a hash of the package set and of the
recipe (``image/Dockerfile``): a changed package set is a new image, never a stale one. The default
package set is the *host's* exact versions of
`DEFAULT_PACKAGES` and of everything they depend on, because a
dill snapshot only loads under the versions that wrote it.

There is one recipe, ``image/Dockerfile``, and two ways to feed it:

* with a registry, ``docker build`` of the context from
  `write_context` (base ``python:3.11-slim-bookworm``, pip reaches
  the index);
* with none (`build_image`, the default): wheels are downloaded
  on the host (``pip download --only-binary=:all:``), a minimal Debian is made with ``debootstrap`` and
  ``docker import``-ed as the base, and the same Dockerfile is built from it with ``pip install
  --no-index`` and no network.

Downloaded wheels, the debootstrap tarball and the imported base image are cached (see
`cache_dir`), so a rebuild after a package change skips
debootstrap.

The room's modules: `cli` (the command line, ``python -m
themisto_env.sandbox.image --help``), `spec` (the package set, the name, the
build context), `build` (building), `debootstrap`
(the Debian base) and `engine` (the engine's client and images).
"""
