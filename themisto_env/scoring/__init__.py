"""Scores of a prediction: the execution score and pass@k (text metrics live in themisto_env.metrics)."""
