"""Kernels on Ray: reaching a cluster, placing kernels, the actor that owns a kernel and its remote handle."""
