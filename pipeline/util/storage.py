"""Object storage: a URL (``s3://bucket/key``, ``gs://``, ``abfs://``, ``hdfs://``) as a filesystem
and a path in it, and its failures as one line that names the URL.

Through pyarrow's filesystems, not fsspec: pyarrow already reads every table ortpipe takes,
and its S3, GCS, Azure and HDFS filesystems are C++ - reads of a Parquet file are ranged
requests streamed as the row groups are read, an output stream is a multipart upload that
stays invisible until it is closed, retries with backoff are the filesystem's own
(``retry_strategy``) - with no second stack of Python clients (s3fs, gcsfs, adlfs).
Credentials, endpoint and region come from each provider's standard environment and config
(for S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``~/.aws``), as pyarrow reads them; ortpipe has no flags of its own for them.
"""

from __future__ import annotations

import re
from typing import Any

#: the URL schemes read through pyarrow's filesystems
STORAGE_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "az", "hdfs", "viewfs")


def is_storage_url(text: object) -> bool:
    """Whether ``text`` is an object storage URL (``s3://...``), not a local path or a stream's URL."""
    if not isinstance(text, str):
        return False
    found = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    return found is not None and found.group(1).lower() in STORAGE_SCHEMES


def filesystem_of(url: str) -> tuple[Any, str]:
    """The pyarrow filesystem of ``url`` and the path within it, or an OSError of one line."""
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(url)  # type: ignore[no-any-return]
    except Exception as exc:
        raise OSError(said(url, exc)) from exc


def said(url: str, error: BaseException) -> str:
    """A store's error in one line naming the URL, with what to check."""
    text = " ".join(str(error).split())
    checks = (
        (("NO_SUCH_BUCKET", "NoSuchBucket", "bucket does not exist"), "the bucket does not exist"),
        (
            ("InvalidAccessKeyId", "SignatureDoesNotMatch", "INVALID_ACCESS_KEY", "credentials"),
            "the credentials were refused (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the provider's own)",
        ),
        (("ACCESS_DENIED", "AccessDenied", "Forbidden", "403"), "access was denied to these credentials"),
        (("Path does not exist", "NoSuchKey", "not found"), "nothing is stored there"),
    )
    for words, meaning in checks:
        if any(word in text for word in words):
            return f"{url!r}: {meaning} ({text[:300]})"
    return f"{url!r}: {text[:300]}"
