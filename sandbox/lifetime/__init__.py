"""Kernels never outlive their owner: owner identities, the reaper, what dead owners left, and run roots."""
