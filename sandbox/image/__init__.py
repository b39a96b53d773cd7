"""The kernel container image: its package set, its name, and how to build it with no registry.

The image is ``themisto-kernel:<tag>``, the tag a hash of the package set and of the recipe
(``image/Dockerfile``), so a changed package set is a new image. The package set is the host's exact
versions, because a dill snapshot only loads under the versions that wrote it. Without a registry
(`build_image`) the wheels are downloaded on the host and the Debian base is made with ``debootstrap``, both
cached (`cache_dir`). The room's modules: `cli` (``python -m themisto_env.sandbox.image --help``), `spec`,
`build`, `debootstrap` and `engine`.
"""
