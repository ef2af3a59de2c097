"""The output lock across machines (NOTE [ one writer ]) on GCS and on Azure, each through its own
client's conditional writes (``util.conditions``: a generation, an ETag), against their emulators
(fake-gcs-server, Azurite).  S3's: ``test_stored_outputs``."""

from __future__ import annotations

import json

import pytest

from pipeline.jobs import output_lock
from pipeline.sinks import SinkError
from pipeline.util.conditions import AzureConditions, GcsConditions, Refused, conditions_of
from pipeline.util.storage import StoredPath

from .stored_jobs import objects

#: this module's bucket (a container on Azure) in each store
BUCKET = "locks"

#: (the store's fixture, its URL scheme, its conditions' class, whether it holds to a delete's
#: condition: fake-gcs-server removes an object whatever its generation, real GCS does not)
STORES = [("gcs", "gs", GcsConditions, False), ("azure", "abfs", AzureConditions, True)]


@pytest.mark.parametrize("fixture, scheme, kind, holds_delete", STORES, ids=[s[0] for s in STORES])
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


@pytest.mark.parametrize("fixture, scheme, kind, holds_delete", STORES, ids=[s[0] for s in STORES])
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
