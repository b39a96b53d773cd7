"""Reaching a Ray cluster, for the commands that run whole jobs on one (``run --ray``, ``data build --ray``)."""
