"""What a watch-fed cache keeps of an object (`vigil.kube.informer.slim`): no write bookkeeping,
no copies of the object, everything else equal, its keys and short strings shared between
objects, and the caller's object left as it was."""

from __future__ import annotations

import copy
import json
from typing import Any

from vigil.kube.informer import COPY_ANNOTATIONS, slim


def job(name: str) -> dict[str, Any]:
    text = json.dumps({
        "metadata": {
            "name": name, "namespace": "team-a", "resourceVersion": "42",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "annotations": {**dict.fromkeys(COPY_ANNOTATIONS, "{...the whole object...}"), "team": "a"},
        },
        "spec": {"cron": "17 3 * * *", "payload": {"blob": "x" * 500}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled"}]},
    })  # fmt: skip
    obj: dict[str, Any] = json.loads(text)  # as the API client decodes it: strings of its own
    return obj


def test_slim_drops_the_bookkeeping_keeps_the_rest_and_leaves_the_object_alone() -> None:
    whole = job("a")
    before = copy.deepcopy(whole)
    kept = slim(whole)
    assert whole == before, "the caller's object was changed"
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"team": "a"}
    rest = {**before, "metadata": {k: v for k, v in before["metadata"].items() if k not in ("managedFields", "annotations")}}
    assert {**kept, "metadata": {k: v for k, v in kept["metadata"].items() if k != "annotations"}} == rest


def test_two_slimmed_objects_share_their_keys_and_short_values_not_long_ones() -> None:
    one, two = slim(job("a")), slim(job("b"))
    key_one = next(k for k in one["status"]["conditions"][0] if k == "reason")
    key_two = next(k for k in two["status"]["conditions"][0] if k == "reason")
    assert key_one is key_two
    assert one["status"]["conditions"][0]["reason"] is two["status"]["conditions"][0]["reason"]
    assert one["spec"]["payload"]["blob"] == two["spec"]["payload"]["blob"]
    assert one["spec"]["payload"]["blob"] is not two["spec"]["payload"]["blob"], "a long value was interned"
