"""rankzero's jobs run by an existing Slurm cluster (docs/slurm.md): the batch script, the state mapper, the
agent that submits and watches, and the rank entry that runs under `srun`. Nothing here imports torch."""
