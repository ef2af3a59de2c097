"""Issue 40: object storage under faults and latency, through a proxy in front of the real S3
server (``tests/store_proxy.py``): transient errors retried with backoff by the filesystem
and by boto3 (NOTE [ retries ]), retries spent said in a line with nothing half-written
under the output's name, ``AWS_MAX_ATTEMPTS`` honoured; and a job's reads and writes in
flight while its model runs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, models
from pipeline.cli import main
from pipeline.jobs import open_source, run_job
from pipeline.sinks.stored import StoredParquetSink
from pipeline.util.storage import STANDARD_ATTEMPTS, filesystem_of, said

from .store_proxy import store_proxy

#: this module's bucket in the session's S3 server (``aws``: tests/conftest.py)
BUCKET = "faults"

ROWS, FEATURES = 3000, 64


@pytest.fixture(scope="module")
def stored_input(s3_server):
    """A table in the store, in row groups of 500 rows: its URL."""
    s3_server.bucket_once(BUCKET)
    x = np.random.default_rng(4).random((ROWS, FEATURES), np.float32)
    table = pa.table({"id": np.arange(ROWS), **{f"f{i}": x[:, i] for i in range(FEATURES)}})
    pq.write_table(table, f"{BUCKET}/x.parquet", filesystem=s3_server.filesystem(), row_group_size=500)
    return f"s3://{BUCKET}/x.parquet"


def _run(source: str, output: str, *more: str) -> int:
    argv = ["run", "mlp", "--input", source, "--output", output, "--id-column", "id", "--device", "cpu"]
    return main([*argv, "--no-progress", "--batch-size", "400", "--part-rows", "1200", *more])


def _through(proxy, monkeypatch) -> None:
    """The test's requests to the store go through ``proxy``."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)


def _objects(store, prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector

    infos = store.filesystem().get_file_info(FileSelector(prefix, allow_not_found=True, recursive=True))
    return sorted(info.path for info in infos)


@pytest.fixture(scope="module")
def reference(s3_server, stored_input, tmp_path_factory):
    """The same job with no proxy between, written locally: what every run here must write."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_server.environment.items():
            patch.setenv(name, value)
        local = tmp_path_factory.mktemp("reference") / "scores.parquet"
        assert _run(stored_input, str(local)) == 0
    return pq.read_table(local)


@pytest.mark.parametrize("fault", ["503", "drop"])
def test_every_request_failed_once_is_retried_and_the_job_writes_what_it_would(
    aws, stored_input, reference, monkeypatch, fault
):
    """The first attempt of every request fails (S3's 503 SlowDown, or the connection dropped):
    the reads, the part uploads, the multipart completions, the lock's conditional writes
    (boto3) and the deletes are each tried again, and the output is the job's whole."""
    output = f"s3://{BUCKET}/retried-{fault}/"
    with store_proxy(aws.endpoint, faults=1, fault=fault) as proxy:
        _through(proxy, monkeypatch)
        assert _run(stored_input, output) == 0
    assert {"HEAD", "GET", "PUT", "DELETE"} <= set(proxy.failed)  # each kind of request failed, and was retried
    conditional = [r for r in proxy.requests if r.method == "PUT" and "ortpipe-lock" in r.path]
    assert len(conditional) >= 2  # the lock's conditional write, failed once, made again
    got = pq.read_table(f"{BUCKET}/retried-{fault}", filesystem=aws.filesystem())
    assert got.equals(reference)
    assert f"{BUCKET}/retried-{fault}/_SUCCESS" in _objects(aws, f"{BUCKET}/retried-{fault}")


def test_retries_spent_are_said_in_a_line_and_nothing_half_written_shows(aws, stored_input, monkeypatch, capsys):
    """A store that keeps failing a part's upload: after the standard 3 attempts the job ends
    with one line naming the output, no traceback, and no part or _SUCCESS under its name."""
    with store_proxy(aws.endpoint, faults=5, applies=lambda method, path: "/spent/part-" in path) as proxy:
        _through(proxy, monkeypatch)
        capsys.readouterr()
        assert _run(stored_input, f"s3://{BUCKET}/spent/") != 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("ortpipe")]
    assert len(said) == 1 and f"s3://{BUCKET}/spent" in said[0] and "Traceback" not in err, err
    assert set(proxy.failed.values()) == {STANDARD_ATTEMPTS}  # the first request to fail, tried 3 times
    assert [name for name in _objects(aws, f"{BUCKET}/spent") if "part-" in name or "_SUCCESS" in name] == []


def test_aws_max_attempts_sets_the_attempts(aws, stored_input, reference, monkeypatch):
    """Three failures of the upload of a part outlast the standard 3 attempts; AWS_MAX_ATTEMPTS=4
    rides them out (each attempt a request of its own at the proxy).  A part this small is
    one PUT (NOTE [ one request for a small object ])."""

    def first_part(method: str, path: str) -> bool:
        return method == "PUT" and path.endswith("/part-00000.parquet")

    with store_proxy(aws.endpoint, faults=3, applies=first_part) as proxy:
        _through(proxy, monkeypatch)
        assert _run(stored_input, f"s3://{BUCKET}/three/") != 0
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
        assert _run(stored_input, f"s3://{BUCKET}/four/") == 0
    assert proxy.failed["PUT"] == 3 + 3  # each run's first part: 3 attempts failed, then the fourth passed
    assert pq.read_table(f"{BUCKET}/four", filesystem=aws.filesystem()).equals(reference)


def test_a_small_object_is_one_put(aws, stored_input, reference, monkeypatch):
    """NOTE [ one request for a small object ]: a part smaller than a piece, ``_SUCCESS`` and
    the job's record are each written by one PUT, not a multipart upload's three requests;
    and an earlier ``_SUCCESS`` is looked for once a run, not once a part."""
    with store_proxy(aws.endpoint) as proxy:
        _through(proxy, monkeypatch)
        assert _run(stored_input, f"s3://{BUCKET}/small/") == 0
    writes = [r for r in proxy.requests if r.method in ("PUT", "POST")]
    assert [r.path for r in writes if r.method == "POST" or "partNumber=" in r.path] == []
    written = sorted(r.path.rsplit("/", 1)[1] for r in writes if "/small/" in r.path)
    assert written == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    # the earlier marker looked for once, before the first part (only this run writes one)
    assert len([r for r in proxy.requests if r.path.endswith("/small/_SUCCESS") and r.method != "PUT"]) == 1
    records = [r for r in writes if r.path.endswith("/.small.ortpipe-job.json")]  # the job's, beside the data set
    assert len(records) == 1 and "?" not in records[0].path
    assert pq.read_table(f"{BUCKET}/small", filesystem=aws.filesystem()).equals(reference)


@pytest.mark.parametrize(("name", "value"), [("AWS_MAX_ATTEMPTS", "many"), ("AWS_RETRY_MODE", "eager")])
def test_a_retry_setting_that_is_not_one_is_refused_naming_it(aws, stored_input, monkeypatch, capsys, name, value):
    monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert _run(stored_input, f"s3://{BUCKET}/refused/") != 0
    err = capsys.readouterr().err
    assert f"{name}={value!r}" in err and "Traceback" not in err, err


def _inside(inner: tuple[float, float], outer: tuple[float, float]) -> bool:
    return outer[0] < inner[0] and inner[1] < outer[1]


def test_reads_and_writes_are_in_flight_while_the_model_runs(aws, monkeypatch):
    """Every read of the input and every upload of a piece of the output held 0.5 s by the
    proxy: batches run inside those requests - pyarrow reads ahead, and uploads a growing
    part's pieces in the background - where a job that read or wrote in its own thread would
    wait.  (Event order, not a speed: a request held is a window the run works in or not.)"""
    fs = aws.filesystem()
    rng = np.random.default_rng(9)
    for number in range(8):  # a prefix of 8 objects of 12,288 rows
        x = rng.random((12_288, FEATURES), np.float32)
        pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(FEATURES)}), f"{BUCKET}/wide/{number}.parquet",
                       filesystem=fs)  # fmt: skip

    def held(method: str, path: str) -> bool:
        return (method == "GET" and "/wide/" in path) or (method == "PUT" and "partNumber=" in path)

    with store_proxy(aws.endpoint, delay_s=0.5, slow=held) as proxy:
        _through(proxy, monkeypatch)
        # identity: 256 bytes of output a row, 25 MB in one part, uploaded in pieces of about
        # 10 MB as it fills (the first once 13 MB or so are written: the batches after it run
        # while it is held)
        with Pipeline(models.identity(features=FEATURES), device="cpu") as pipe:
            source = open_source(f"s3://{BUCKET}/wide/", pipe, 4096)
            sink = StoredParquetSink(f"s3://{BUCKET}/wide-out/", data_set=True, row_group_rows=4096, compression="none")
            summary = run_job(pipe, source, sink)
            origin = pipe.stats.device_origin
            runs = [
                (origin + t.compute_at, origin + t.compute_at + t.compute_s)
                for t in pipe.stats.timings
                if t.compute_at is not None and t.compute_s is not None
            ]
    assert summary.items == 8 * 12_288 and len(runs) == 24
    reads = [(r.started, r.ended) for r in proxy.requests if r.method == "GET" and "/wide/" in r.path]
    uploads = [(r.started, r.ended) for r in proxy.requests if r.method == "PUT" and "partNumber=" in r.path]
    assert len(uploads) >= 2, "the part went up in pieces"
    assert any(_inside(run, read) for run in runs for read in reads), "no batch ran while a read was in flight"
    assert any(_inside(run, up) for run in runs for up in uploads), "no batch ran while an upload was in flight"


@pytest.mark.parametrize(
    "text, meaning",
    [
        # S3 through pyarrow and boto3, and GCS as pyarrow's GCS (google-cloud-cpp) says its statuses
        ("AWS Error ACCESS_DENIED during PutObject operation: Access Denied", "access was denied"),
        ("google::cloud::Status(PERMISSION_DENIED: caller does not have storage.objects.create)", "access was denied"),
        ("google::cloud::Status(UNAUTHENTICATED: invalid credentials)", "credentials were refused"),
        ("AWS Error NO_SUCH_BUCKET during HeadBucket operation", "the bucket does not exist"),
    ],
)
def test_a_stores_error_is_said_in_a_line_with_what_to_check(text, meaning):
    said_line = said("gs://bucket/key", OSError(text + "\n  detail"))
    assert said_line.startswith("'gs://bucket/key': ") and meaning in said_line and "\n" not in said_line


def test_an_azure_connection_string_names_the_account_its_key_and_its_endpoint(monkeypatch):
    """NOTE [ Azure connection string ]: Azurite's short form, a full string with another
    endpoint, and the URL's two forms (container/path, container@account.../path)."""
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    fs, path = filesystem_of("abfs://box/out/set")
    options = fs.__reduce__()[1][0]
    assert path == "box/out/set" and options["account_name"] == "devstoreaccount1"
    assert options["blob_storage_authority"] == "127.0.0.1:10000" and options["blob_storage_scheme"] == "http"
    string = (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;BlobEndpoint=https://blobs.example:8443/acct"
    )
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", string)
    fs, path = filesystem_of("abfss://box@acct.dfs.core.windows.net/x.parquet?ignored=1")
    options = fs.__reduce__()[1][0]
    assert path == "box/x.parquet" and (options["account_name"], options["account_key"]) == ("acct", "a2V5")
    assert (options["blob_storage_authority"], options["blob_storage_scheme"]) == ("blobs.example:8443", "https")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=acct;AccountKey=a2V5")
    fs, path = filesystem_of("az://box")  # Azure's own endpoints: pyarrow's defaults
    assert path == "box" and fs.__reduce__()[1][0]["blob_storage_authority"] == ".blob.core.windows.net"
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    for url in ("az://box/x", "abfs://box/x"):  # no account anywhere: said how to name one
        with pytest.raises(OSError, match=f"{url}.*no Azure account: name it in the URL .*AZURE_STORAGE_CONN"):
            filesystem_of(url)
    fs, path = filesystem_of("abfs://box@acct.dfs.core.windows.net/x")  # the account in the URL: pyarrow's own
    assert path == "box/x" and fs.type_name == "abfs"


def test_a_store_that_cannot_be_reached_names_the_endpoint_setting(monkeypatch):
    """Issue 56: with no S3 endpoint set, a host that does not resolve was said with no word of
    AWS_ENDPOINT_URL."""
    from pipeline.util.storage import said

    error = OSError("When resolving region for bucket 'b': AWS Error NETWORK_CONNECTION: Could not resolve host")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    line = said("s3://b/x.parquet", error)
    assert "the store could not be reached (no S3 endpoint is set" in line and "AWS_ENDPOINT_URL" in line
    assert said("s3://b/x.parquet", OSError(line)) == line  # said once, however far up it goes
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert "no S3 endpoint is set" not in said("s3://b/x.parquet", error)
