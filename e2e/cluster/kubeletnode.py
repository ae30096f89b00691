"""A real node for the local control plane: kubelet, containerd 2, runc and the CNI bridge.

The node agent (`e2e/nodeagent.py`) is fast and runs most of the suite; this is
the node for what only a real one shows: out-of-memory kills by the kernel,
image errors, grace periods, termination messages, deadlines enforced by the
kubelet. Everything it writes lives under the cluster's state directory
(`<state>/node-kubelet/`), so two clusters on one machine keep apart:

* containerd: its root, state, sockets, runc's state and the pods' network
  namespaces; a config.toml rendered here (CRI plugin, runc with cgroupfs —
  `SystemdCgroup = false` —, the overlayfs snapshotter, or native where overlay
  cannot mount, the sandbox image pinned, and `restrict_oom_score_adj`: this
  host's root lacks CAP_SYS_RESOURCE, so runc cannot give the sandbox the
  kubelet's -998 and fails every pod with "can't get final child's PID from
  pipe" unless scores are kept no lower than containerd's own);
* CNI: a bridge per cluster (`vgl<port base>`) with host-local addresses on a
  private /24, and loopback; the IPAM state beside it;
* kubelet: its root directory, certificates and a KubeletConfiguration fitting a
  test node on this kernel — cgroup v1 allowed (`failCgroupV1: false`, refused by
  default since 1.35), cgroupfs, swap tolerated, eviction and image GC thresholds
  out of the way of a busy shared disk, its pods' cgroups under a root of the
  cluster's own (`/vigil-<state dir name>`), webhook authentication and
  authorisation against the API server, which reaches it with the admin's
  client certificate.

`localcluster` starts and stops the processes; this module renders their files
and does what stopping them leaves: the pods' containers (and their shims, which
outlive containerd), the mounts kubelet and containerd made (projected volumes,
shm, rootfs overlays, network namespaces, the kubelet's own bind mount), the
bridge and the cgroups.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from e2e.cluster import images, serviceroutes

CGROUP_V1 = Path("/sys/fs/cgroup")
#: How long removing every pod through the CRI may take before the processes are killed.
POD_STOP_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class NodeFiles:
    """Where one cluster's real node keeps everything."""

    state: Path  # the cluster's state directory
    port_base: int

    @property
    def root(self) -> Path:
        return self.state / "node-kubelet"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def image_archive_cache(self) -> Path:
        return Path(os.environ.get("VIGIL_CACHE", Path.home() / ".cache" / "vigil")) / "images"

    @property
    def bridge(self) -> str:
        return f"vgl{self.port_base}"[:15]  # a Linux interface name has at most 15 characters

    @property
    def subnet(self) -> str:
        """A private /24 per cluster, from its port base (26500 → 10.201.9.0/24: 265 mod 256)."""
        return f"10.201.{(self.port_base // 100) % 256}.0/24"

    @property
    def cgroup_root(self) -> str:
        return f"/vigil-{self.state.name}"

    @property
    def kubelet_port(self) -> int:
        return self.port_base + 250

    @property
    def kubelet_healthz_port(self) -> int:
        return self.port_base + 248


def runc() -> str:
    found = shutil.which("runc")
    if not found:
        raise RuntimeError("runc is missing: apt-get install runc (scripts/system-deps.sh installs it)")
    return found


def node_ip() -> str:
    """The address of the interface the default route leaves by (kubelet refuses loopback)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("203.0.113.1", 9))  # TEST-NET-3; no packet is sent: a UDP connect only picks a route
        address: str = probe.getsockname()[0]
    except OSError as err:
        raise RuntimeError("the kubelet needs a non-loopback IPv4 address, and this host has no route") from err
    finally:
        probe.close()
    return address


def snapshotter(files: NodeFiles) -> str:
    """overlayfs if an overlay mounts under the containerd root here, else native (plain copies)."""
    probe = files.root / "overlay-probe"
    dirs = {name: probe / name for name in ("lower", "upper", "work", "merged")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(dirs["merged"])], capture_output=True, check=False
    )
    if mounted.returncode == 0:
        subprocess.run(["umount", str(dirs["merged"])], check=True, capture_output=True)
    shutil.rmtree(probe, ignore_errors=True)
    return "overlayfs" if mounted.returncode == 0 else "native"


def containerd_config(files: NodeFiles, *, cni_bin: Path, snapshotter_name: str) -> str:
    """containerd 2's config.toml (version 3) for this node."""
    return f"""\
version = 3
root = {json.dumps(str(files.containerd_root))}
state = {json.dumps(str(files.containerd_state))}

[grpc]
  address = {json.dumps(str(files.socket))}

[ttrpc]
  address = {json.dumps(str(files.socket) + ".ttrpc")}

[plugins]
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.internal.v1.opt']
    path = {json.dumps(str(files.root / "containerd" / "opt"))}
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = {json.dumps(snapshotter_name)}
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = {json.dumps(images.PAUSE_IMAGE)}
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    tolerate_missing_hugetlb_controller = true
    disable_hugetlb_controller = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = {json.dumps(runc())}
          Root = {json.dumps(str(files.containerd_state / "runc"))}
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [{json.dumps(str(cni_bin))}]
      conf_dir = {json.dumps(str(files.cni_conf_dir))}
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
"""


def cni_config(files: NodeFiles) -> dict[str, object]:
    """bridge + host-local on the cluster's /24 (the bridge is the gateway), then loopback, then portmap."""
    return {
        "cniVersion": "1.0.0",
        "name": "vigil",
        "plugins": [
            {
                "type": "bridge",
                "bridge": files.bridge,
                "isGateway": True,
                "ipMasq": False,  # pods talk to the host and each other; nothing here routes outwards
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": files.subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(files.cni_data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


LOOPBACK_CNI = {"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}


def resolv_conf() -> str:
    """The host's resolv.conf for pods' DNS (there is no cluster DNS), unless it names only loopback."""
    path = Path("/etc/resolv.conf")
    if not path.exists():
        return ""
    servers = [line.split()[1] for line in path.read_text().splitlines() if line.startswith("nameserver ")]
    return str(path) if any(not s.startswith("127.") for s in servers) else ""


def kubelet_config(files: NodeFiles, *, ca: Path, address: str) -> dict[str, object]:
    # Percent thresholds must be positive; 1% keeps the kubelet from evicting or collecting
    # images because a disk shared with builds and other clusters is busy.
    floor = {"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
             "imagefs.available": "1%", "imagefs.inodesFree": "1%"}  # fmt: skip
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # this kernel mounts cgroup v1; kubelet refuses it by default since 1.35
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": files.cgroup_root,
        "containerRuntimeEndpoint": files.endpoint,
        "address": address,
        "port": files.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": files.kubelet_healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "failSwapOn": False,
        "evictionHard": floor,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "resolvConf": resolv_conf(),
        "clusterDomain": "cluster.local",
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",  # no systemd inhibitor here
        "registerNode": True,
    }


def write_files(files: NodeFiles, *, node_bin: Path, ca: Path) -> str:
    """Render containerd's, the CNI's and the kubelet's configuration; returns the node's address."""
    for path in (files.containerd_root, files.containerd_state, files.cni_conf_dir, files.cni_data_dir,
                 files.kubelet_root):  # fmt: skip
        path.mkdir(parents=True, exist_ok=True)
    files.containerd_config.write_text(
        containerd_config(files, cni_bin=node_bin, snapshotter_name=snapshotter(files))
    )
    (files.cni_conf_dir / "10-vigil.conflist").write_text(json.dumps(cni_config(files), indent=2))
    (files.cni_conf_dir / "99-loopback.conf").write_text(json.dumps(LOOPBACK_CNI, indent=2))
    address = node_ip()
    files.kubelet_config.write_text(json.dumps(kubelet_config(files, ca=ca, address=address), indent=2))
    _make_cgroup_root(files.cgroup_root)
    return address


def containerd_argv(files: NodeFiles, node_bin: Path) -> list[str]:
    return [str(node_bin / "containerd"), "--config", str(files.containerd_config), "--log-level", "warn"]


def kubelet_argv(files: NodeFiles, node_bin: Path, *, node_name: str, address: str) -> list[str]:
    return [
        str(node_bin / "kubelet"),
        f"--config={files.kubelet_config}",
        f"--kubeconfig={files.kubelet_kubeconfig}",
        f"--root-dir={files.kubelet_root}",
        f"--cert-dir={files.kubelet_root / 'pki'}",
        f"--hostname-override={node_name}",
        f"--node-ip={address}",
        "--v=1",
    ]


def containerd_env(node_bin: Path) -> dict[str, str]:
    """containerd finds its shim (containerd-shim-runc-v2) on PATH."""
    return {"PATH": f"{node_bin}:{os.environ.get('PATH', '')}"}


def ctr(files: NodeFiles, node_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node_bin / "ctr"), "--address", str(files.socket), "--namespace", "k8s.io", *args],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def containerd_ready(files: NodeFiles, node_bin: Path) -> bool:
    return files.socket.exists() and ctr(files, node_bin, "version").returncode == 0


def load_images(files: NodeFiles, node_bin: Path) -> None:
    """Import the busybox job image and the sandbox image into containerd's `k8s.io` namespace."""
    listed = ctr(files, node_bin, "images", "ls", "-q").stdout.split()
    wanted = set(images.NODE_IMAGES)
    if all(any(name.endswith(image) for name in listed) for image in wanted):
        return
    archive = images.archive_for(files.image_archive_cache)
    snap = snapshotter_of(files)
    done = ctr(files, node_bin, "images", "import", "--snapshotter", snap, str(archive))
    if done.returncode != 0:
        raise RuntimeError(f"ctr images import {archive} failed: {done.stderr.strip()}")


def snapshotter_of(files: NodeFiles) -> str:
    text = files.containerd_config.read_text()
    return "native" if 'snapshotter = "native"' in text else "overlayfs"


# --- stopping: what the processes leave ---------------------------------------------------


def remove_pods(files: NodeFiles, node_bin: Path) -> None:
    """Stop and remove every pod sandbox through the CRI (while containerd still runs)."""
    if not files.socket.exists():
        return
    subprocess.run(
        [str(node_bin / "crictl"), "--runtime-endpoint", files.endpoint, "--timeout", "30s", "rmp", "--all", "--force"],
        capture_output=True, check=False, timeout=POD_STOP_TIMEOUT_S,
    )  # fmt: skip


def leftover_pids(files: NodeFiles) -> list[int]:
    """Processes still naming this node's files (containerd's shims, which containerd does not
    take down with it) and every process in the node's cgroups (what the containers run)."""
    marker = str(files.root).encode()
    found = _cgroup_pids(files.cgroup_root)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(proc.name))
    return sorted(set(found))


def _cgroup_pids(name: str) -> list[int]:
    found: list[int] = []
    for controller in _controllers():
        top = controller / name.lstrip("/")
        for procs in top.rglob("cgroup.procs") if top.exists() else ():
            try:
                found += [int(pid) for pid in procs.read_text().split()]
            except OSError:
                continue
    return found


def kill_leftovers(files: NodeFiles, *, grace_s: float = 5.0) -> None:
    """SIGKILL every leftover process of this node, by pid, and wait until they are gone."""
    for pid in leftover_pids(files):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while leftover_pids(files) and time.monotonic() < deadline:
        time.sleep(0.1)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # \040 and the like
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def unmount_all(root: Path) -> list[str]:
    """Unmount everything at or below `root` (a path can be mounted more than once); returns
    what is still mounted afterwards, which should be nothing."""
    for _ in range(10):
        points = mounts_under(root)
        if not points:
            return []
        for point in points:
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    return mounts_under(root)


def _controllers() -> list[Path]:
    if not CGROUP_V1.exists():
        return []
    # Every hierarchy, the hybrid layout's cgroup2 `unified` one too: runc creates the pods' there as well.
    return [p for p in sorted(CGROUP_V1.iterdir()) if p.is_dir() and not p.is_symlink()]


def _make_cgroup_root(name: str) -> None:
    """The kubelet wants its cgroup root to exist in every hierarchy; cpuset's needs cpus and mems."""
    for controller in _controllers():
        path = controller / name.lstrip("/")
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (path / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((controller / knob).read_text())


def remove_cgroups(name: str) -> list[str]:
    """Remove the node's cgroup tree in every hierarchy, leaves first; returns what could not go."""
    left = []
    for controller in _controllers():
        top = controller / name.lstrip("/")
        if not top.exists():
            continue
        for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            _rmdir(path, left)
        _rmdir(top, left)
    return left


def _rmdir(path: Path, left: list[str]) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        left.append(str(path))


def remove_bridge(files: NodeFiles) -> None:
    subprocess.run(["ip", "link", "delete", files.bridge], capture_output=True, check=False)


def clean(files: NodeFiles) -> list[str]:
    """After the processes stopped: kill leftovers, unmount, remove the bridge and cgroups.
    Returns what is left (mounts or cgroups), which should be nothing."""
    kill_leftovers(files)
    left = unmount_all(files.root)
    serviceroutes.remove_all(files.bridge)
    remove_bridge(files)
    left += remove_cgroups(files.cgroup_root)
    return left
