"""The job's spec is parsed once along an occurrence's path (`KubeCatalogue.spec_of`).

The trigger's lookup parses the ScheduledJob; the launch and the attempt's pod (built by the
dispatcher) ask the catalogue for the spec of the object they hold, and get the one the lookup
parsed while it is that very object (its uid and resourceVersion), else a spec parsed from what
they hold. The cache here is a stub holding the objects a test puts in it.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from kubernetes import client

from vigil.kube.stores.jobs import KubeCatalogue
from vigil.model.jobspec import InvalidJob


class Cache:
    """The few members of the ScheduledJob informer the catalogue reads."""

    def __init__(self) -> None:
        self.synced = threading.Event()
        self.synced.set()
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))


def job(*, version: str | None = "7", uid: str = "u-1", image: str = "busybox") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "nightly", "namespace": "shop", "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"}
    if version is not None:
        meta["resourceVersion"] = version
    return {
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": meta,
        "spec": {
            "cron": "0 2 * * *",
            "timezone": "Europe/London",
            "template": {"spec": {"containers": [{"name": "main", "image": image, "command": ["true"]}]}},
        },
    }


def catalogue_with(obj: dict[str, Any]) -> KubeCatalogue:
    cache = Cache()
    cache.objects[("shop", "nightly")] = obj
    catalogue = KubeCatalogue(client.ApiClient(), cache=cache)  # never asked: the cache holds the job
    assert catalogue.lookup("shop", "nightly").job is not None
    return catalogue


def test_the_object_the_trigger_read_gets_the_spec_it_parsed() -> None:
    catalogue = catalogue_with(job())
    assert catalogue.spec_of(copy.deepcopy(job())) is catalogue.cached_spec("shop", "nightly")


@pytest.mark.parametrize(
    "held",
    [
        pytest.param(job(version="8", image="alpine"), id="a newer version"),
        pytest.param(job(uid="u-2", image="alpine"), id="a job created again under the same name"),
    ],
)
def test_another_object_is_parsed_from_what_is_held(held: dict[str, Any]) -> None:
    catalogue = catalogue_with(job())
    spec = catalogue.spec_of(held)
    assert spec is not catalogue.cached_spec("shop", "nightly")
    assert spec.template is not None and "alpine" in str(spec.template)


def test_an_object_without_a_version_is_always_parsed() -> None:
    catalogue = catalogue_with(job(version=None))
    assert catalogue.spec_of(job(version=None)) is not catalogue.cached_spec("shop", "nightly")


def test_a_job_the_trigger_never_read_is_parsed_and_an_invalid_one_raises() -> None:
    catalogue = catalogue_with(job())
    other = job()
    other["metadata"]["name"] = "weekly"
    assert catalogue.spec_of(other) is not catalogue.cached_spec("shop", "nightly")
    other["spec"]["cron"] = "not a schedule at all"
    other["spec"]["every"] = "1m"  # two schedules: the spec's own validation refuses it
    with pytest.raises(InvalidJob):
        catalogue.spec_of(other)
