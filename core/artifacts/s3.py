"""Any S3-compatible object store (`RANKZERO_ARTIFACT_STORE=s3://bucket/prefix`), through boto3.

Each object carries the sha256 verified at upload in its metadata (`x-amz-meta-sha256`), so a reader
checks what it gets against the same digest. Credentials and the endpoint come from settings
(RANKZERO_S3_*), else boto3's own chain (environment, ~/.aws, instance role).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.artifacts.base import CHUNK, ArtifactMissing, Entry, StoreUnavailable
from core.artifacts.keys import relative_path


def parse_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` → ("bucket", "some/prefix/"); ValueError when it is not such a URL."""
    if not url.startswith("s3://"):
        raise ValueError(f"an S3 store is named s3://bucket/prefix, not {url!r}")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError("the S3 URL names no bucket: s3://bucket/prefix")
    prefix = prefix.strip("/")
    return bucket, (relative_path(prefix) + "/") if prefix else ""


class S3Store:
    kind = "s3"

    def __init__(self, url: str, client: Any) -> None:
        self.bucket, self.prefix = parse_url(url)
        self.where = url
        self.client = client

    def _object(self, key: str) -> str:
        return self.prefix + relative_path(key)

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise ArtifactMissing(f"no artifact {kwargs.get('Key', '')}") from None
            raise StoreUnavailable(f"S3 {what} on {self.where} failed: {exc}") from None
        except BotoCoreError as exc:
            raise StoreUnavailable(
                f"S3 {what} on {self.where} failed: {exc} (check RANKZERO_S3_ENDPOINT_URL)"
            ) from None

    def put(self, key: str, source: Path, sha256: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:  # boto3's managed transfer: multipart for large files, retried parts
            self.client.upload_file(
                str(source), self.bucket, self._object(key), ExtraArgs={"Metadata": {"sha256": sha256}}
            )
        except (BotoCoreError, ClientError) as exc:
            raise StoreUnavailable(f"S3 upload of {key} to {self.where} failed: {exc}") from None

    def read(self, key: str, start: int = 0) -> Iterator[bytes]:
        extra = {"Range": f"bytes={start}-"} if start else {}
        body = self._call("GET", self.client.get_object, Key=self._object(key), **extra)["Body"]

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(CHUNK)
            finally:
                body.close()

        return chunks()

    def stat(self, key: str) -> Entry | None:
        try:
            head = self._call("HEAD", self.client.head_object, Key=self._object(key))
        except ArtifactMissing:
            return None
        return Entry(key, int(head["ContentLength"]), (head.get("Metadata") or {}).get("sha256"))

    def list(self, prefix: str, limit: int) -> list[Entry]:
        found: list[Entry] = []
        token: dict[str, str] = {}
        while len(found) < limit:
            page = self._call("LIST", self.client.list_objects_v2, Prefix=self.prefix + prefix,
                              MaxKeys=min(1000, limit - len(found)), **token)  # fmt: skip
            for obj in page.get("Contents", []):
                found.append(Entry(str(obj["Key"])[len(self.prefix) :], int(obj["Size"]), None))
            if not page.get("IsTruncated"):
                break
            token = {"ContinuationToken": page["NextContinuationToken"]}
        return found[:limit]

    def delete(self, key: str) -> None:
        self._call("DELETE", self.client.delete_object, Key=self._object(key))
