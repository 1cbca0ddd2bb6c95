"""Code bundle archives made by hand, to craft what `rankzero submit --code` never makes (tests/code)."""

from __future__ import annotations

import gzip
import io
import tarfile


def make_tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A tar.gz of hand-made members (data for regular files), to craft what the packer never makes."""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return raw.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o644
    return info
