"""The gymnasium env: config, actions, observations, observation tools."""
