"""Kernel templates: a warm process that forks kernels (the zygote), the copies' identities, and the
docker backend's template in a container.
"""
