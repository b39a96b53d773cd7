"""Bridges to other frameworks: TRL and gymnasium vector envs (rl), inspect_ai."""
