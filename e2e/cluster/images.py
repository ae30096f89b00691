"""The images a kubelet node runs, written from Python: no registry, no Docker.

No image registry is reachable from these machines, so the two images the real
node needs are made here from Debian's `busybox-static` binary (one static file,
`apt-get install busybox-static`):

* `JOB_IMAGE` — busybox with its applets as symlinks (`sh`, `head`, `sleep`, …),
  for job pods. Pods name it with `imagePullPolicy: IfNotPresent` or `Never`.
* `EXAMPLE_IMAGE` — the same image under the name manifests/examples use
  (`busybox:1.36`), so `make demo` runs the examples unchanged on the kubelet
  node: there the name stands for this local image, as no registry answers.
* `PAUSE_IMAGE` — the same layer whose entrypoint sleeps: the pod sandbox image
  containerd's CRI plugin holds each pod's namespaces with (what
  `registry.k8s.io/pause` does elsewhere). The sandbox is stopped with SIGKILL,
  so a sleeping process serves.

All go into one docker-archive tarball (`manifest.json` with `RepoTags`, a config
JSON per image, one uncompressed layer tar), which `ctr -n k8s.io images import`
loads. The tarball depends only on the busybox binary and the names, so it is rebuilt
only when those change.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
JOB_IMAGE = "vigil.local/busybox:static"
PAUSE_IMAGE = "vigil.local/pause:static"
EXAMPLE_IMAGE = "busybox:1.36"
#: Every name the node's containerd should hold.
NODE_IMAGES = (JOB_IMAGE, EXAMPLE_IMAGE, PAUSE_IMAGE)
#: ctr names an image from a docker archive by its tag, normalised as a Docker reference.
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PAUSE_SECONDS = "2147483647"  # busybox sleep takes whole seconds; about 68 years


def busybox_binary() -> Path:
    """The static busybox binary, or an error that says which package brings it."""
    found = shutil.which("busybox")
    path = Path(found) if found else BUSYBOX
    if not path.exists():
        raise RuntimeError("busybox is missing: apt-get install busybox-static (see scripts/system-deps.sh)")
    ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    if "not a dynamic executable" not in ldd.stdout + ldd.stderr:
        raise RuntimeError(f"{path} is linked dynamically; the image needs Debian's busybox-static")
    return path


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True).stdout
    return sorted({name for name in out.split() if name and name != "busybox"})


def _layer(busybox: Path) -> bytes:
    """One layer: /bin/busybox, a symlink per applet in /bin, and the usual empty directories."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("bin", "etc", "tmp", "root", "proc", "sys", "dev"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in _applets(busybox):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            body = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(body), 0o644
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def _config(layer_digest: str, *, entrypoint: list[str], cmd: list[str]) -> bytes:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": [PATH_ENV], "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "e2e/cluster/images.py: Debian busybox-static"}],
    }
    return json.dumps(config, sort_keys=True).encode()


def write_archive(path: Path, busybox: Path | None = None) -> Path:
    """Write the docker-archive tarball holding NODE_IMAGES to `path`."""
    busybox = busybox or busybox_binary()
    layer = _layer(busybox)
    layer_hex = hashlib.sha256(layer).hexdigest()
    shell = _config(f"sha256:{layer_hex}", entrypoint=[], cmd=["sh"])
    pause = _config(f"sha256:{layer_hex}", entrypoint=["/bin/sleep", PAUSE_SECONDS], cmd=[])
    tags = {shell: [JOB_IMAGE, EXAMPLE_IMAGE], pause: [PAUSE_IMAGE]}  # one image, all its names
    members: dict[str, bytes] = {f"{layer_hex}/layer.tar": layer}
    manifest = []
    for config, names in tags.items():
        config_name = f"{hashlib.sha256(config).hexdigest()}.json"
        members[config_name] = config
        manifest.append({"Config": config_name, "RepoTags": names, "Layers": [f"{layer_hex}/layer.tar"]})
    members["manifest.json"] = json.dumps(manifest).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(path)
    return path


def archive_for(cache: Path) -> Path:
    """The tarball for the installed busybox, written into `cache` unless already there."""
    busybox = busybox_binary()
    key = hashlib.sha256(busybox.read_bytes() + "\n".join(NODE_IMAGES).encode()).hexdigest()[:16]
    path = cache / f"busybox-images-{key}.tar"
    if not path.exists():
        write_archive(path, busybox)
    return path
