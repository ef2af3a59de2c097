"""Object storage: a URL (``s3://bucket/key``, ``gs://``, ``abfs://``, ``hdfs://``) as a filesystem
and a path in it, and its failures as one line that names the URL.

Through pyarrow's filesystems, not fsspec: pyarrow already reads every table ortpipe takes,
and its S3, GCS, Azure and HDFS filesystems are C++ - reads of a Parquet file are ranged
requests streamed as the row groups are read, an output stream is a multipart upload that
stays invisible until it is closed, retries with backoff are the filesystem's own
(NOTE [ retries ]) - with no second stack of Python clients (s3fs, gcsfs, adlfs).
Credentials, endpoint and region come from each provider's standard environment and config
(for S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``~/.aws``), as pyarrow reads them - and GCS's ``STORAGE_EMULATOR_HOST``
and Azure's ``AZURE_STORAGE_CONNECTION_STRING``, which pyarrow does not
(NOTE [ GCS emulator ], NOTE [ Azure connection string ]); ortpipe has no flags of its own
for them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

#: attempts at a request, the first included, where AWS_MAX_ATTEMPTS is unset (the AWS standard mode's)
STANDARD_ATTEMPTS = 3

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
        emulated = _gcs_emulator(url) or _azure_connection(url)
        if emulated is not None:
            return emulated
        fs, path = pafs.FileSystem.from_uri(url)
        return _tuned(fs), path
    except Exception as exc:
        raise OSError(said(url, exc)) from exc


def _gcs_emulator(url: str) -> tuple[Any, str] | None:
    """A ``gs://`` URL's filesystem where ``STORAGE_EMULATOR_HOST`` names a GCS emulator
    (NOTE [ GCS emulator ]); None otherwise.

    NOTE [ GCS emulator ]: Google's clients (google-cloud-storage, gcsfs, the Go and Java
    ones) reach an emulator - fake-gcs-server, the storage testbench - where
    ``STORAGE_EMULATOR_HOST`` names it (``http://host:port``), without credentials.
    pyarrow's GCS filesystem reads no such variable, and made from the URL alone it looks
    for Google's credentials (the metadata server, retried for minutes where there is none).
    So ortpipe reads it, as the other clients do: anonymous, at that endpoint."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    scheme, _, rest = url.partition("://")
    if not host or scheme.lower() not in ("gs", "gcs"):
        return None
    import pyarrow.fs as pafs

    found = re.match(r"^(?:(https?)://)?([^/]+)/?$", host)
    if found is None:
        raise ValueError(f"STORAGE_EMULATOR_HOST={host!r}: expected http://host:port")
    fs = pafs.GcsFileSystem(anonymous=True, scheme=found.group(1) or "http", endpoint_override=found.group(2))
    return fs, rest.split("?", 1)[0].rstrip("/")


#: Azurite's account and key, the same for everyone (``UseDevelopmentStorage=true``: Microsoft's docs)
_AZURITE_ACCOUNT = "devstoreaccount1"
_AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: the URL schemes of Azure's blob storage
AZURE_SCHEMES = ("abfs", "abfss", "az")


@dataclass(frozen=True)
class AzureAccount:
    """An Azure storage account as its connection string names it (NOTE [ Azure connection string ])."""

    name: str
    key: str
    #: its blob service's URL where it is not Azure's own (an emulator's), else None
    blob_endpoint: str | None = None

    @property
    def blob_url(self) -> str:
        """Its blob service's URL, as Azure's SDKs take it."""
        return self.blob_endpoint or f"https://{self.name}.blob.core.windows.net"


def azure_account() -> AzureAccount | None:
    """The account ``AZURE_STORAGE_CONNECTION_STRING`` names; None where it is unset.

    NOTE [ Azure connection string ]: an Azure storage account's connection string
    (``AccountName=...;AccountKey=...``, with ``BlobEndpoint=`` for another endpoint: Azurite,
    the emulator, at ``http://127.0.0.1:10000/devstoreaccount1``, or
    ``UseDevelopmentStorage=true``) is what Azure's CLI, adlfs and Azurite's docs take from
    ``AZURE_STORAGE_CONNECTION_STRING``.  pyarrow reads no such variable: from the URL alone
    it takes the account from the URL's host and Azure's default credentials (Entra ID),
    which an emulator does not take.  So ortpipe reads it, as those do, and the URL names the
    container and the path: ``abfs://container/path`` (or ``container@account.dfs...``, its
    account then the string's)."""
    found = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "").strip()
    if not found:
        return None
    fields = dict(part.split("=", 1) for part in found.split(";") if "=" in part)
    if fields.get("UseDevelopmentStorage", "").lower() == "true":
        return AzureAccount(_AZURITE_ACCOUNT, _AZURITE_KEY, f"http://127.0.0.1:10000/{_AZURITE_ACCOUNT}")
    name, key = fields.get("AccountName"), fields.get("AccountKey")
    if not name or not key:
        raise ValueError("AZURE_STORAGE_CONNECTION_STRING: expected AccountName=...;AccountKey=...")
    return AzureAccount(name, key, fields.get("BlobEndpoint") or None)


def _azure_connection(url: str) -> tuple[Any, str] | None:
    """An ``abfs://`` (``abfss://``, ``az://``) URL's filesystem where
    ``AZURE_STORAGE_CONNECTION_STRING`` is set (NOTE [ Azure connection string ]); None otherwise."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in AZURE_SCHEMES:
        return None
    account = azure_account()
    if account is None:
        if scheme.lower() == "az" or "@" not in rest.split("/", 1)[0]:  # pyarrow would say only "no account"
            raise ValueError(
                "no Azure account: name it in the URL (abfs://container@account.dfs.core.windows.net/path), "
                "or give its connection string in AZURE_STORAGE_CONNECTION_STRING"
            )
        return None
    import pyarrow.fs as pafs

    options: dict[str, Any] = {"account_name": account.name, "account_key": account.key}
    endpoint = re.match(r"^(https?)://([^/]+)", account.blob_endpoint or "")
    if endpoint is not None:  # another endpoint than Azure's: the emulator's, say (one for blobs and DFS)
        options.update(blob_storage_scheme=endpoint[1], blob_storage_authority=endpoint[2],
                       dfs_storage_scheme=endpoint[1], dfs_storage_authority=endpoint[2])  # fmt: skip
    container, _, path = rest.split("?", 1)[0].partition("/")
    return pafs.AzureFileSystem(**options), f"{container.split('@', 1)[0]}/{path}".rstrip("/")


def _tuned(fs: Any) -> Any:
    """An S3 filesystem made again with its options, its retries (NOTE [ retries ]) and its
    output streams opened without a request (NOTE [ one request for a small object ]).

    NOTE [ retries ]: a store's transient errors (S3's 503 SlowDown and 500s, a dropped
    connection) are retried with exponential backoff and jitter by the filesystem itself -
    pyarrow's S3 with the AWS SDK's standard strategy - and by boto3 where ortpipe writes
    conditionally (``util.conditions``: its standard mode).  Both take the AWS settings every
    SDK reads: ``AWS_MAX_ATTEMPTS``, attempts in all with the first (the standard mode's 3
    where unset: raise it for long jobs on a busy bucket; a job that failed resumes), and
    ``AWS_RETRY_MODE`` (``standard``; ``legacy``, the SDK's older strategy; ``adaptive``,
    which pyarrow lacks, is ``standard`` here).  ``from_uri`` takes no strategy, and its
    own default retries at a fixed interval (about 30 attempts 0.24 s apart, measured).

    NOTE [ one request for a small object ]: pyarrow's output stream starts a multipart
    upload when it is opened, so every object it writes costs three requests at least
    (start, a piece, complete), however small.  Opened with ``allow_delayed_open``, it
    starts one only once a piece (10 MB) is full, and an object smaller than that is one
    PUT at its close: a data set's small parts, its ``_SUCCESS`` and the job's record.
    Both appear whole or not at all (NOTE [ stored outputs ]), and a killed run leaves
    no upload behind for a small one.  What it costs is where an open's failure shows:
    at the first piece or the close, where a sink's failures are said anyway; a bucket
    that does not exist is refused before the job starts (``StoredPath.check_bucket``).
    What it saves a job: docs/results.md."""
    if fs.type_name != "s3":
        return fs
    import pyarrow.fs as pafs

    _, (options,) = fs.__reduce__()  # the filesystem's options, as pickling carries them
    return pafs.S3FileSystem(**{**options, "retry_strategy": _s3_retry_strategy(), "allow_delayed_open": True})


def aws_retry_mode() -> str:
    """``AWS_RETRY_MODE`` checked (NOTE [ retries ]): standard where unset; refused, naming it,
    where it is none of the modes the AWS SDKs know."""
    mode = os.environ.get("AWS_RETRY_MODE", "").strip().lower() or "standard"
    if mode not in ("standard", "adaptive", "legacy"):
        raise ValueError(f"AWS_RETRY_MODE={mode!r}: expected standard, adaptive or legacy")
    return mode


def _s3_retry_strategy() -> Any:
    """pyarrow's retry strategy for ``AWS_MAX_ATTEMPTS`` and ``AWS_RETRY_MODE`` (NOTE [ retries ])."""
    import pyarrow.fs as pafs

    mode = aws_retry_mode()
    attempts = os.environ.get("AWS_MAX_ATTEMPTS", "").strip()
    try:
        most = int(attempts or STANDARD_ATTEMPTS)
        if most < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"AWS_MAX_ATTEMPTS={attempts!r}: expected a whole number of attempts, 1 or more") from None
    kind = pafs.AwsDefaultS3RetryStrategy if mode == "legacy" else pafs.AwsStandardS3RetryStrategy
    return kind(max_attempts=most)


def said(url: str, error: BaseException) -> str:
    """A store's error in one line naming the URL, with what to check."""
    text = " ".join(str(error).split())
    if text.startswith(f"{url!r}: "):  # said already, on its way up
        return text
    checks = (
        (("NO_SUCH_BUCKET", "NoSuchBucket", "bucket does not exist", "ContainerNotFound"), "the bucket does not exist"),
        (
            (
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "INVALID_ACCESS_KEY",
                "UNAUTHENTICATED",
                "credentials",
                "AuthenticationFailed",
            ),
            "the credentials were refused (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the provider's own)",
        ),
        (
            ("ACCESS_DENIED", "AccessDenied", "PERMISSION_DENIED", "Forbidden", "403", "AuthorizationFailure"),
            "access was denied to these credentials",
        ),
        (("Path does not exist", "NoSuchKey", "not found"), "nothing is stored there"),
        (
            ("Could not resolve host", "Name or service not known", "NETWORK_CONNECTION"),
            "the store could not be reached"
            + (
                ""
                if os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
                else " (no S3 endpoint is set, so AWS's own was asked: AWS_ENDPOINT_URL names an S3-compatible "
                "server such as MinIO or SeaweedFS)"
            )
            if url.startswith("s3")
            else "the store could not be reached",
        ),
    )
    for words, meaning in checks:
        if any(word in text for word in words):
            return f"{url!r}: {meaning} ({text[:300]})"
    return f"{url!r}: {text[:300]}"


class StoredPath:
    """A name in an object store, used as the sinks use a local ``Path``: its filesystem,
    its path there (``bucket/key``) and its scheme, shown as the URL it was named by.

    An object appears whole or not at all (a write is a PUT, or a multipart upload that
    is completed at its close), so what a local file needs a hidden name and a rename
    for (NOTE [ stored outputs ] in ``sinks.stored``) an object has by being written."""

    __slots__ = ("fs", "path", "scheme")

    def __init__(self, fs: Any, path: str, scheme: str) -> None:
        self.fs, self.path, self.scheme = fs, path.rstrip("/"), scheme

    @classmethod
    def of(cls, url: str) -> StoredPath:
        """The object store's path ``url`` names (``s3://bucket/key``; a trailing / is dropped)."""
        fs, path = filesystem_of(url)
        return cls(fs, path, url.split("://", 1)[0].lower())

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.path}"

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"StoredPath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoredPath) and (self.url, self.fs) == (other.url, other.fs)

    def __hash__(self) -> int:
        return hash(self.url)

    def __truediv__(self, name: str) -> StoredPath:
        return StoredPath(self.fs, f"{self.path}/{name}", self.scheme)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent(self) -> StoredPath:
        return StoredPath(self.fs, self.path.rsplit("/", 1)[0], self.scheme)

    @property
    def suffix(self) -> str:
        name = self.name
        return name[name.rfind(".") :] if "." in name.lstrip(".") else ""

    @property
    def bucket(self) -> str:
        return self.path.split("/", 1)[0]

    @property
    def key(self) -> str:
        """The path within the bucket."""
        return self.path.split("/", 1)[1] if "/" in self.path else ""

    @property
    def shows_unfinished(self) -> bool:
        """Whether the store shows an object before it is whole: Azure's, through pyarrow.

        NOTE [ objects seen before they are whole ]: pyarrow's Azure output stream makes its
        blob, empty, when it is opened, and commits what was written at each flush: a
        listing shows the object before its close (measured against Azurite).  S3's and
        GCS's uploads appear only once completed.  So on Azure the part a run was writing
        when it was killed is there, empty or cut short, and a resume removes it and writes
        it anew (``sinks.stored``); an object of one file is written aside and copied to
        its name as on every store, a small one with bytes (a job's record) there too
        (:meth:`write_bytes`), and a reader waits for ``_SUCCESS`` as it does on all."""
        return bool(self.fs.type_name == "abfs")

    def check_bucket(self) -> None:
        """An OSError naming the URL where its bucket does not exist (or cannot be listed)."""
        import pyarrow.fs as pafs

        try:
            found = self.fs.get_file_info(self.bucket).type != pafs.FileType.NotFound
        except Exception as exc:
            raise OSError(said(self.url, exc)) from exc
        if not found:
            raise OSError(f"{self.url!r}: the bucket {self.bucket!r} does not exist")

    def with_name(self, name: str) -> StoredPath:
        return self.parent / name

    def _info(self) -> Any:
        try:
            return self.fs.get_file_info(self.path)
        except Exception as exc:
            raise OSError(said(self.url, exc)) from exc

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return bool(self._info().type != pafs.FileType.NotFound)

    def is_file(self) -> bool:
        import pyarrow.fs as pafs

        return bool(self._info().type == pafs.FileType.File)

    def is_dir(self) -> bool:
        """Whether objects are stored under this name as a prefix."""
        import pyarrow.fs as pafs

        return bool(self._info().type == pafs.FileType.Directory)

    def size(self) -> int:
        return int(self._info().size or 0)

    def iterdir(self) -> list[StoredPath]:
        """The objects and prefixes right under this one (none where there are none).

        NOTE [ prefixes as folders ]: a prefix that objects were written under (a data
        set's parts, an overwrite's staging) is a folder to S3's listing, which returns
        it as a common prefix; not to pyarrow's GCS, which lists without recursion only
        objects and the markers of its own ``create_dir``, so that a folder of folders
        looked empty there, and an overwrite copied nothing.  On GCS a folder's entries
        are the first names in a listing of everything under it."""
        import pyarrow.fs as pafs

        whole = self.fs.type_name == "gcs"
        try:
            found = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=whole))
        except Exception as exc:
            raise OSError(said(self.url, exc)) from exc
        start = len(self.path) + 1
        names = {info.path[start:].split("/", 1)[0] for info in found} - {""}
        return [self / name for name in sorted(names)]

    def read_bytes(self) -> bytes:
        """The object's bytes; FileNotFoundError where there is none."""
        if not self.is_file():
            raise FileNotFoundError(self.url)
        try:
            with self.fs.open_input_stream(self.path) as stream:
                return bytes(stream.read())
        except Exception as exc:
            raise OSError(said(self.url, exc)) from exc

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def write_bytes(self, data: bytes) -> None:
        """The object written whole (it replaces one of the same name only once uploaded; on
        a store that shows an object before it is whole, written aside and copied to its name:
        NOTE [ objects seen before they are whole ])."""
        if self.shows_unfinished and data:  # an empty object is whole from its start
            aside = self.parent / f".{self.name}.ortpipe-writing"
            aside._put(data)
            aside.copy_to(self)
            aside.unlink(missing_ok=True)
            return
        self._put(data)

    def _put(self, data: bytes) -> None:
        try:
            with self.fs.open_output_stream(self.path) as stream:
                stream.write(data)
        except Exception as exc:
            raise OSError(said(self.url, exc)) from exc

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except Exception as exc:
            if missing_ok and not self.exists():
                return
            raise OSError(said(self.url, exc)) from exc

    def copy_to(self, target: StoredPath) -> None:
        """A copy made by the store itself (S3's CopyObject): no byte comes here."""
        try:
            self.fs.copy_file(self.path, target.path)
        except Exception as exc:
            raise OSError(said(self.url, exc)) from exc

    def remove_tree(self) -> None:
        """Every object under this prefix removed (none there: nothing to do)."""
        if not self.is_dir():
            return
        try:
            self.fs.delete_dir_contents(self.path, missing_dir_ok=True)
            self.fs.delete_dir(self.path)
        except FileNotFoundError:
            return
        except Exception as exc:
            if self.is_dir():
                raise OSError(said(self.url, exc)) from exc
