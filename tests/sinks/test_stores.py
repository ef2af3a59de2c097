"""What GCS and Azure do alike, each store a parameter, against their emulators (fake-gcs-server,
Azurite): a data set, an object and an input what a local run has, an earlier output refused,
resumed or replaced whole, and the output lock across machines (NOTE [ one writer ]), each through
its own client's conditional writes (``util.conditions``: a generation, an ETag).  Each store's own:
``test_gcs_outputs``, ``test_azure_outputs``; S3's: ``test_stored_outputs``."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipeline.jobs import output_lock
from pipeline.sinks import SinkError
from pipeline.util.conditions import AzureConditions, GcsConditions, Refused, conditions_of
from pipeline.util.storage import StoredPath

from .stored_jobs import objects, scored

#: this module's bucket (a container on Azure) in each store
BUCKET = "stores"

#: (the store's fixture, its URL scheme, its conditions' class, whether it holds to a delete's
#: condition: fake-gcs-server removes an object whatever its generation, real GCS does not)
STORES = [("gcs", "gs", GcsConditions, False), ("azure", "abfs", AzureConditions, True)]
#: each store's fixture and URL scheme
SCHEMES = [(fixture, scheme) for fixture, scheme, *_ in STORES]
IDS = [fixture for fixture, *_ in STORES]


@pytest.mark.parametrize("fixture, scheme", SCHEMES, ids=IDS)
def test_a_data_set_an_object_and_an_input_are_what_a_local_run_has(request, fixture, scheme, table, local, capsys):
    store = request.getfixturevalue(fixture)
    assert scored(table, f"{scheme}://{BUCKET}/set/", "--part-rows", "300") == 0
    assert "no lock" not in capsys.readouterr().err  # locked, by the store's own client's conditional writes
    assert scored(table, f"{scheme}://{BUCKET}/one.parquet") == 0
    fs = store.filesystem()
    assert pq.read_table(f"{BUCKET}/set", filesystem=fs).equals(local)
    assert pq.read_table(f"{BUCKET}/one.parquet", filesystem=fs).equals(local)
    parts = [f"{BUCKET}/set/part-0000{i}.parquet" for i in range(4)]
    assert objects(store, f"{BUCKET}/set") == [f"{BUCKET}/set/_SUCCESS", *parts]
    assert not [name for name in objects(store, BUCKET) if name.endswith("ortpipe-lock")]  # released
    pq.write_table(pq.read_table(table), f"{BUCKET}/input.parquet", filesystem=fs)
    assert scored(f"{scheme}://{BUCKET}/input.parquet", f"{scheme}://{BUCKET}/read/") == 0
    assert pq.read_table(f"{BUCKET}/read", filesystem=fs).equals(local)


@pytest.mark.parametrize("fixture, scheme", SCHEMES, ids=IDS)
def test_an_earlier_output_is_refused_resumed_or_replaced_whole(request, fixture, scheme, table, local, capsys):
    """The overwrite is the case a listing without folders broke on GCS: its staging prefix holds
    the new data set as a prefix, which looked empty, so nothing was copied and the run said 0."""
    store = request.getfixturevalue(fixture)
    url = f"{scheme}://{BUCKET}/again/"
    assert scored(table, url, "--part-rows", "300") == 0
    capsys.readouterr()
    assert scored(table, url) == 1
    assert "holds 4 part file(s) of an earlier run" in capsys.readouterr().err
    assert scored(table, url, "--resume") == 0  # every row there: nothing to add
    assert scored(table, url, "--overwrite", "--part-rows", "600", "--rows", "0:900") == 0
    names = objects(store, f"{BUCKET}/again")
    assert names == [f"{BUCKET}/again/_SUCCESS", *[f"{BUCKET}/again/part-0000{i}.parquet" for i in range(2)]]
    assert pq.read_table(f"{BUCKET}/again", filesystem=store.filesystem()).equals(local.slice(0, 900))
    assert not objects(store, f"{BUCKET}/.ortpipe-overwrite.again")


@pytest.mark.parametrize("fixture, scheme, kind, holds_delete", STORES, ids=IDS)
def test_the_lock_refuses_a_second_writer_and_a_lapsed_one_is_taken_over(request, fixture, scheme, kind, holds_delete):
    store = request.getfixturevalue(fixture)
    url = f"{scheme}://{BUCKET}/locked/"
    with output_lock(url, SinkError):
        assert f"{BUCKET}/.locked.ortpipe-lock" in objects(store, BUCKET)
        with pytest.raises(SinkError, match="being written by another ortpipe run"):
            with output_lock(url, SinkError):
                pass
    conditions = conditions_of(StoredPath.of(url))
    assert isinstance(conditions, kind)
    # a killed run's lock, last renewed longer ago than the lease: taken over
    conditions.create(".x.ortpipe-lock", json.dumps({"host": "gone", "pid": 1, "renewed": 0.0}).encode())
    with output_lock(f"{scheme}://{BUCKET}/x/", SinkError):
        found = conditions.read(".x.ortpipe-lock")
        assert found is not None and json.loads(found[0])["pid"] != 1
    assert conditions.read(".x.ortpipe-lock") is None  # released


@pytest.mark.parametrize("fixture, scheme, kind, holds_delete", STORES, ids=IDS)
def test_a_lock_is_made_once_and_renewed_only_on_its_own_version(request, fixture, scheme, kind, holds_delete):
    """The conditions a lease stands on: a second make refused, a renewal on a version that is
    no longer the object's (the lock was taken over) refused, and a release too where the
    store holds to it - quietly, the object left to its new holder."""
    request.getfixturevalue(fixture)
    conditions = conditions_of(StoredPath.of(f"{scheme}://{BUCKET}/renewed"))
    assert conditions is not None
    first = conditions.create("renewed", b"1")
    with pytest.raises(Refused):
        conditions.create("renewed", b"2")
    second = conditions.replace("renewed", b"3", first)
    with pytest.raises(Refused):
        conditions.replace("renewed", b"4", first)
    assert conditions.read("renewed") == (b"3", second) and second != first
    if holds_delete:
        conditions.delete("renewed", first)  # stale: refused, quietly
        assert conditions.read("renewed") == (b"3", second)
    conditions.delete("renewed", second)
    assert conditions.read("renewed") is None
    conditions.delete("renewed", second)  # already gone: quiet
    assert conditions.abort_uploads("renewed/") == 0  # nothing a killed writer leaves shows on either
