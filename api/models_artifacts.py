"""REST shapes of the artifact store (workers' uploads) and of a job's outputs (issue 22 part B)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ArtifactStorage(BaseModel):
    """Where this API keeps what workers upload: `disk` (its runs dir) or `s3` (an object store)."""

    kind: Literal["disk", "s3"]
    where: str = Field(description="The folder or s3://bucket/prefix.")


class StoredFile(BaseModel):
    """A file the store now holds, as verified on arrival."""

    path: str = Field(description="Relative to the job's run dir.")
    bytes: int
    sha256: str


class AppendedLog(BaseModel):
    """How much of an appended file the API holds now: the next chunk starts there."""

    path: str
    size: int


class OutputFile(BaseModel):
    path: str = Field(description="Relative to the job's work dir (download it with GET .../outputs/file?path=).")
    bytes: int
    sha256: str | None = Field(description="sha256 of its bytes (None only when the store recorded none).")
    downloadable: bool = Field(
        True,
        description="False for a name that holds a control character or bytes that are not UTF-8: listed with "
        "those escaped (\\xNN), not served (rename it in the job).",
    )


class OutputList(BaseModel):
    job_id: int
    patterns: list[str] = Field(description="The spec's `outputs` globs ([]: every file under the work dir).")
    files: list[OutputFile]
    truncated: bool = Field(description="More files than RANKZERO_OUTPUTS_MAX_FILES: the list stops there.")
