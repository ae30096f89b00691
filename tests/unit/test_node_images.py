"""The kubelet node's images, written without a registry (e2e/cluster/images.py).

The archive is what `ctr images import` reads: a docker-archive whose manifest names every image
the node needs, the examples' `busybox:1.36` among them, so `make demo` runs the examples
unchanged. A stand-in busybox (a shell script) stands in for Debian's static binary, which the
archive only copies.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import images

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


def test_the_archive_names_every_node_image_once(tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"
    busybox.write_text("#!/bin/sh\necho sh sleep\n")
    busybox.chmod(0o755)
    archive = images.write_archive(tmp_path / "images.tar", busybox)
    with tarfile.open(archive) as tar:
        manifest = _json(tar, "manifest.json")
        configs = {entry["Config"]: _json(tar, entry["Config"]) for entry in manifest}
    names = [name for entry in manifest for name in entry["RepoTags"]]
    assert sorted(names) == sorted(images.NODE_IMAGES)
    by_name = {name: configs[entry["Config"]] for entry in manifest for name in entry["RepoTags"]}
    assert by_name[images.EXAMPLE_IMAGE] == by_name[images.JOB_IMAGE]  # one image, two names
    assert by_name[images.PAUSE_IMAGE]["config"]["Entrypoint"][0] == "/bin/sleep"


def test_every_example_names_an_image_the_node_holds() -> None:
    """What `make demo` applies on the kubelet node must not wait on a pull no registry answers."""
    named = set()
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            named |= set(_images(doc))
    assert named and named <= set(images.NODE_IMAGES), named


def _json(tar: tarfile.TarFile, name: str) -> Any:
    member = tar.extractfile(name)
    assert member is not None, name
    return json.load(member)


def _images(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["image"]] if isinstance(node.get("image"), str) else []
        return found + [image for value in node.values() for image in _images(value)]
    if isinstance(node, list):
        return [image for value in node for image in _images(value)]
    return []
