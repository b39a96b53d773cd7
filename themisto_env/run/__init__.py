"""Evaluation runs: planning, the episode loop, executors, results, report, view, compare."""
