"""The settings of a Slurm pool (worker/slurm/, `rankzero slurm-agent`; docs/slurm.md), a mixin `Settings` inherits
(core/settings.py's line limit): every field is still read from RANKZERO_SLURM_<NAME> and reached as
`settings.slurm_<name>`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

# sbatch options an admin may add to every job of a Slurm pool (settings slurm_sbatch_options): resources and
# placement only; nothing that changes where output goes, who runs it, or what the script is.
SLURM_ALLOWED_OPTIONS = frozenset({
    "--constraint", "--mem", "--mem-per-cpu", "--mem-per-gpu", "--cpus-per-task", "--gres", "--exclusive",
    "--reservation", "--licenses", "--comment", "--wckey", "--cluster-constraint", "--exclude", "--nodelist",
})  # fmt: skip


class SlurmPoolSettings(BaseSettings):
    """A Slurm pool's settings: where its jobs go, their bounds, and whom they are submitted as."""

    slurm_pool: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="The pool (a job's queue) `rankzero slurm-agent` hands to Slurm; rankzero places nothing there.",
    )
    slurm_partition: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="sbatch --partition (default: the cluster's)."
    )
    slurm_account: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="sbatch --account (fair share charged to it)."
    )
    slurm_qos: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="sbatch --qos.")
    slurm_time_limit_min: int = Field(
        24 * 60,
        ge=1,
        le=525_600,
        description="sbatch --time of every job (minutes); a job checkpoints and requeues "
        "itself before it runs out (slurm_signal_margin_s).",
    )
    slurm_max_time_limit_min: int | None = Field(
        None,
        ge=1,
        le=525_600,
        description="The longest --time a job of the pool may ask for (spec slurm.time_limit_min, minutes); "
        "default: slurm_time_limit_min (a job may ask for less, not more).",
    )
    slurm_partitions: str = Field(
        "",
        max_length=2000,
        pattern=r"^[A-Za-z0-9._, -]*$",
        description="Partitions a job of the pool may ask for (spec slurm.partition), separated by commas; "
        "slurm_partition is always allowed.",
    )
    slurm_port_range: str = Field(
        "20000-39999",
        pattern=r"^\d{1,5}-\d{1,5}$",
        description="The ports the ranks' rendezvous (MASTER_PORT) is drawn from, 'LOW-HIGH': what the site's "
        "firewall opens between compute nodes.",
    )
    slurm_signal_margin_s: int = Field(
        180,
        ge=30,
        le=3600,
        description="sbatch --signal=USR1@margin: the ranks checkpoint this long before the time "
        "limit (Slurm may signal up to 60 s early; leave room for a checkpoint).",
    )
    slurm_sbatch_options: str = Field(
        "",
        max_length=2000,
        description="Extra sbatch options for every job of the pool, separated by spaces "
        "(e.g. '--constraint=a100 --mem=64G'); only the names in SLURM_ALLOWED_OPTIONS.",
    )
    slurm_nice_for_priority: bool = Field(
        False,
        description="Map a job's priority to sbatch --nice (priority p → nice 1000 − p; 0 for p ≥ 1000): "
        "higher rankzero priority, earlier in Slurm's queue. Off: the QOS alone decides.",
    )
    slurm_gpus_per_rank: int = Field(
        0,
        ge=0,
        le=8,
        description="GPUs each rank of a device 'auto' job asks for (--gpus-per-node = ranks × this); "
        "a device 'cuda' job asks for at least 1.",
    )
    slurm_python: str | None = Field(
        None,
        max_length=4096,
        description="The Python on the compute nodes (with rankzero and torch installed, on the "
        "shared file system); default: the agent's own.",
    )
    slurm_runs_dir: Path | None = Field(
        None, description="The runs dir as the compute nodes see it (shared with the agent); default: runs_dir."
    )
    slurm_poll_s: float = Field(
        2.0, ge=0.2, le=300, description="How often the agent asks Slurm (one squeue, one sacct for missing jobs)."
    )
    slurm_command_timeout_s: float = Field(
        30.0, ge=1, le=600, description="A Slurm command slower than this is abandoned and retried next period."
    )
    slurm_user_map: Path | None = Field(
        None,
        description="A TOML file mapping rankzero users to the site's Unix users (and Slurm accounts/QOS): the agent "
        "submits each job as its owner's Unix user, so Slurm's accounting, fair share and limits are per person "
        "(worker/slurm/people.py; docs/slurm.md 'Jobs that belong to people'). Unset: every job is the agent's.",
    )
    slurm_unmapped: Literal["service", "refuse"] = Field(
        "service",
        description="With slurm_user_map: a job whose owner the map does not name runs as the agent's own user "
        "('service') or fails before Slurm sees it, saying whom to ask ('refuse').",
    )
    slurm_submit_as: str = Field(
        "sudo -n -u {user} --",
        max_length=500,
        description="The command prefix that runs sbatch, scancel and scontrol as a mapped user ({user}: the Unix "
        "user); the site's sudo rule allows it (docs/slurm.md).",
    )

    @field_validator("slurm_port_range")
    @classmethod
    def _port_range(cls, v: str) -> str:
        low, high = (int(x) for x in v.split("-"))
        if not 1024 <= low <= high <= 65535:
            raise ValueError(f"slurm_port_range {v!r}: give LOW-HIGH with 1024 ≤ LOW ≤ HIGH ≤ 65535")
        return v

    @field_validator("slurm_submit_as")
    @classmethod
    def _submit_as(cls, value: str) -> str:
        words = value.split()
        if "{user}" not in value or not words or "{user}" in words[0]:
            raise ValueError(
                f"slurm_submit_as {value!r} must be a command prefix naming {{user}}, e.g. 'sudo -n -u {{user}} --'"
            )
        return value

    @field_validator("slurm_sbatch_options")
    @classmethod
    def _sbatch_options(cls, value: str) -> str:
        for option in value.split():
            name = option.split("=", 1)[0]
            if name not in SLURM_ALLOWED_OPTIONS or any(c.isspace() or c in "'\"`$;\\" for c in option):
                raise ValueError(
                    f"sbatch option {option!r} is not allowed: use --NAME=VALUE (no spaces or quotes) with NAME one of "
                    + ", ".join(sorted(SLURM_ALLOWED_OPTIONS))
                )
        return " ".join(value.split())
