"""What an object store offers beyond pyarrow's filesystem: conditional writes, the
multipart uploads a killed writer left unfinished, and copies of objects over 5 GB.

pyarrow's filesystems write and read objects but send no ``If-None-Match`` or ``If-Match``
and cannot list or abort multipart uploads, which the output lock across machines
(NOTE [ one writer ] in ``jobs.output_lock``) and a resumed stored data set
(NOTE [ stored outputs ] in ``sinks.stored``) need; and pyarrow copies an object with one
CopyObject request, which S3 refuses for a source over 5 GB (:func:`copy_object`).  On S3
(and stores that speak its API: MinIO, SeaweedFS, Ceph, R2) boto3 does, with the same
standard environment and config as pyarrow's (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``~/.aws``).  On GCS,
google-cloud-storage does, its conditions on an object's generation (``ifGenerationMatch``:
0 where none may exist), with Google's default credentials or ``STORAGE_EMULATOR_HOST``;
there an upload never finalized is never seen and lapses by itself, and a copy is a
rewrite of any size.  On Azure, azure-storage-blob does, its conditions on an object's
ETag, with the account's key from ``AZURE_STORAGE_CONNECTION_STRING``
(NOTE [ Azure connection string ]) or Azure's default credentials (azure-identity); there
a blob's uncommitted blocks are never seen either.  Elsewhere (HDFS), or without the
library, there are none: :func:`conditions_of` says None, and the callers say what that
leaves unguarded.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any, Protocol
from urllib.parse import urlparse

from .storage import AZURE_SCHEMES, StoredPath, aws_retry_mode, azure_account, said


class Refused(Exception):
    """A conditional write whose condition did not hold (HTTP 412): another writer was first."""


class StoreConditions(Protocol):
    """A bucket's conditional writes and its unfinished uploads; a version (``etag``) is the
    store's own token of one object's content (S3's ETag, GCS's generation)."""

    bucket: str

    def create(self, key: str, body: bytes) -> str: ...

    def replace(self, key: str, body: bytes, etag: str) -> str: ...

    def read(self, key: str) -> tuple[bytes, str] | None: ...

    def delete(self, key: str, etag: str) -> None: ...

    def abort_uploads(self, prefix: str) -> int: ...


class S3Conditions:
    """Conditional writes and unfinished uploads of one S3 bucket, through boto3."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._client, self.bucket = client, bucket

    def create(self, key: str, body: bytes) -> str:
        """``key`` written only where no object has that name (``If-None-Match: *``); its ETag.
        :class:`Refused` where one has."""
        return self._put(key, body, IfNoneMatch="*")

    def replace(self, key: str, body: bytes, etag: str) -> str:
        """``key`` written only where it is still the object of ``etag`` (``If-Match``); its new ETag."""
        return self._put(key, body, IfMatch=etag)

    def read(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, None where there is none."""
        try:
            found = self._client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            raise OSError(said(self._url(key), exc)) from exc
        return found["Body"].read(), found["ETag"]

    def delete(self, key: str, etag: str) -> None:
        """``key`` removed only where it is still the object of ``etag``; a refusal is quiet
        (another writer holds it now), as is an object already gone."""
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key, IfMatch=etag)
        except Exception as exc:
            if _code(exc) not in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                raise OSError(said(self._url(key), exc)) from exc

    def abort_uploads(self, prefix: str) -> int:
        """The multipart uploads under ``prefix`` never completed (a killed writer's) aborted:
        their parts are freed, and they can never complete; how many."""
        aborted = 0
        try:
            pages = self._client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                for upload in page.get("Uploads", []):
                    self._client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted += 1
        except Exception as exc:
            raise OSError(said(self._url(prefix), exc)) from exc
        return aborted

    def copy(self, source: str, target: StoredPath, piece_bytes: int) -> None:
        """``source`` copied to ``target`` by the store in pieces of ``piece_bytes`` (S3's
        UploadPartCopy, boto3's managed copy): no byte comes here, and no 5 GB limit."""
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=piece_bytes, multipart_chunksize=piece_bytes)
        try:
            self._client.copy({"Bucket": self.bucket, "Key": source}, target.bucket, target.key, Config=config)
        except Exception as exc:
            raise OSError(said(self._url(source), exc)) from exc

    def _put(self, key: str, body: bytes, **condition: str) -> str:
        try:
            return str(self._client.put_object(Bucket=self.bucket, Key=key, Body=body, **condition)["ETag"])
        except Exception as exc:
            if _code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                raise Refused(self._url(key)) from exc
            raise OSError(said(self._url(key), exc)) from exc

    def _url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


class GcsConditions:
    """Conditional writes of one GCS bucket, through google-cloud-storage: an object's
    version is its generation, and ``ifGenerationMatch`` the condition (0: no object yet)."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._bucket, self.bucket = client.bucket(bucket), bucket

    def create(self, key: str, body: bytes) -> str:
        """``key`` written only where no object has that name; its generation."""
        return self._put(key, body, 0)

    def replace(self, key: str, body: bytes, etag: str) -> str:
        """``key`` written only where it is still generation ``etag``; its new generation."""
        return self._put(key, body, int(etag))

    def read(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and generation (one request: the download says it), None where there is none."""
        from google.api_core.exceptions import NotFound

        blob = self._bucket.blob(key)
        try:
            body = blob.download_as_bytes()
        except NotFound:
            return None
        except Exception as exc:
            raise OSError(said(self._url(key), exc)) from exc
        return body, str(blob.generation)

    def delete(self, key: str, etag: str) -> None:
        """``key`` removed only where it is still generation ``etag``; a refusal is quiet
        (another writer holds it now), as is an object already gone."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            self._bucket.blob(key).delete(if_generation_match=int(etag))
        except (NotFound, PreconditionFailed):
            return
        except Exception as exc:
            raise OSError(said(self._url(key), exc)) from exc

    def abort_uploads(self, prefix: str) -> int:
        """None to abort: an upload never finalized is never listed or read, and lapses by itself."""
        return 0

    def _put(self, key: str, body: bytes, generation: int) -> str:
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(key)
        try:
            blob.upload_from_string(body, if_generation_match=generation)
        except PreconditionFailed as exc:
            raise Refused(self._url(key)) from exc
        except Exception as exc:
            raise OSError(said(self._url(key), exc)) from exc
        return str(blob.generation)

    def _url(self, key: str) -> str:
        return f"gs://{self.bucket}/{key}"


class AzureConditions:
    """Conditional writes of one Azure container, through azure-storage-blob: an object's
    version is its ETag, the conditions ``If-None-Match: *`` and ``If-Match``."""

    def __init__(self, client: Any, container: str) -> None:
        self._container, self.bucket = client.get_container_client(container), container

    def create(self, key: str, body: bytes) -> str:
        """``key`` written only where no blob has that name; its ETag."""
        from azure.core.exceptions import ResourceExistsError

        try:
            return str(self._container.get_blob_client(key).upload_blob(body, overwrite=False)["etag"])
        except ResourceExistsError as exc:
            raise Refused(self._url(key)) from exc
        except Exception as exc:
            raise OSError(said(self._url(key), exc)) from exc

    def replace(self, key: str, body: bytes, etag: str) -> str:
        """``key`` written only where it is still ETag ``etag``; its new ETag."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        blob = self._container.get_blob_client(key)
        try:
            written = blob.upload_blob(body, overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceNotFoundError) as exc:
            raise Refused(self._url(key)) from exc
        except Exception as exc:
            raise OSError(said(self._url(key), exc)) from exc
        return str(written["etag"])

    def read(self, key: str) -> tuple[bytes, str] | None:
        """The blob's bytes and ETag (one request: the download says it), None where there is none."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            download = self._container.get_blob_client(key).download_blob()
            return download.readall(), str(download.properties.etag)
        except ResourceNotFoundError:
            return None
        except Exception as exc:
            raise OSError(said(self._url(key), exc)) from exc

    def delete(self, key: str, etag: str) -> None:
        """``key`` removed only where it is still ETag ``etag``; a refusal is quiet (another
        writer holds it now), as is a blob already gone."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        try:
            self._container.get_blob_client(key).delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceNotFoundError):
            return
        except Exception as exc:
            raise OSError(said(self._url(key), exc)) from exc

    def abort_uploads(self, prefix: str) -> int:
        """None to abort: a blob's uncommitted blocks are never listed or read, and lapse by themselves."""
        return 0

    def _url(self, key: str) -> str:
        return f"abfs://{self.bucket}/{key}"


def conditions_of(path: StoredPath) -> StoreConditions | None:
    """The conditional writes of ``path``'s store: S3's where boto3 is installed, GCS's where
    google-cloud-storage is, Azure's where azure-storage-blob is (and a key, or azure-identity
    for Azure's default credentials), else None; an OSError naming the URL where GCS's
    client cannot be made (no credentials)."""
    if path.scheme in ("gs", "gcs"):
        return _gcs_conditions(path)
    if path.scheme in AZURE_SCHEMES:
        return _azure_conditions(path)
    if path.scheme != "s3":
        return None
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        return None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    style = "path" if endpoint and _ip_or_local(endpoint) else "auto"  # an IP has no bucket subdomains
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    # the mode AWS_RETRY_MODE names, standard where unset (NOTE [ retries ]); botocore reads
    # AWS_MAX_ATTEMPTS itself
    config = Config(s3={"addressing_style": style}, retries={"mode": aws_retry_mode()})
    client = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=region, config=config)
    return S3Conditions(client, path.bucket)


def _gcs_conditions(path: StoredPath) -> GcsConditions | None:
    try:
        from google.cloud import storage
    except ImportError:
        return None
    try:  # the emulator's address or Google's default credentials, as every Google client reads them
        client = storage.Client()
    except Exception as exc:
        raise OSError(said(path.url, exc)) from exc
    return GcsConditions(client, path.bucket)


def _azure_conditions(path: StoredPath) -> AzureConditions | None:
    """The account's key where ``AZURE_STORAGE_CONNECTION_STRING`` names one
    (NOTE [ Azure connection string ]), else the URL's account with Azure's default
    credentials (azure-identity's, where it is installed)."""
    try:
        from azure.storage.blob import BlobServiceClient
    except ImportError:
        return None
    account = azure_account()
    if account is not None:
        credential: Any = {"account_name": account.name, "account_key": account.key}
        return AzureConditions(BlobServiceClient(account.blob_url, credential=credential), path.bucket)
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    name = path.fs.__reduce__()[1][0]["account_name"]  # pyarrow's, from the URL (as pickling carries it)
    client = BlobServiceClient(f"https://{name}.blob.core.windows.net", credential=DefaultAzureCredential())
    return AzureConditions(client, path.bucket)


#: the largest object S3 copies in one request (CopyObject); a larger one is copied in pieces
ONE_COPY_BYTES = 5 << 30
#: the pieces of a copy in pieces: S3 allows 10,000 of them, so up to 5 TB, its largest object
COPY_PIECE_BYTES = 512 << 20


def copy_object(source: StoredPath, target: StoredPath) -> None:
    """``source`` copied to ``target`` by the store (no byte comes here): on S3 in one request up
    to :data:`ONE_COPY_BYTES`, in pieces above it where boto3 can, else an OSError that says so;
    elsewhere in one (GCS's rewrite takes any size)."""
    size, one_copy_bytes = source.size(), ONE_COPY_BYTES
    if size <= one_copy_bytes or source.scheme != "s3":  # GCS's copy is a rewrite, of any size
        source.copy_to(target)
        return
    conditions = conditions_of(source)
    if not isinstance(conditions, S3Conditions):
        raise OSError(
            f"{source.url!r}: {size:,} bytes is more than the store copies in one request ({one_copy_bytes:,}); "
            "on S3, install boto3 (pip install '.[storage]' in a checkout of ortpipe) to copy it in pieces"
        )
    conditions.copy(source.key, target, min(COPY_PIECE_BYTES, one_copy_bytes))


def _ip_or_local(endpoint: str) -> bool:
    host = urlparse(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _code(error: BaseException) -> str:
    """A botocore ClientError's error code (or HTTP status), '' for anything else."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
