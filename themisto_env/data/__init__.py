"""Development trajectories as records: JuNE logs and notebooks in, trajectories, replay agreement, samples."""
