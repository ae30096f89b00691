"""The operator image and the project's own Docker daemon, for tests that run containers.

`make image` (scripts/image.sh) builds `vigil:<version>`: it installs Docker where it is
missing, starts the daemon of e2e/cluster/dockerd.sh (state under .cluster/docker) and builds
the base from Debian's packages where no registry image exists. `build_image()` runs that same
script, so a test checks the image users build, never a second recipe; a warm rerun costs about
a second. Every docker command goes to that daemon's socket (DOCKER_HOST), never to a Docker the
machine runs for itself.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess

from tests.integration.conftest import REPO

DOCKERD = REPO / "e2e" / "cluster" / "dockerd.sh"
IMAGE_SCRIPT = REPO / "scripts" / "image.sh"
#: A cold build (debootstrap of the base, the wheels, the image) takes ~5 minutes here.
BUILD_TIMEOUT_S = 1200


@dataclasses.dataclass(frozen=True)
class Docker:
    """The project's Docker daemon, by its address."""

    host: str

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["docker", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "DOCKER_HOST": self.host},
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def answers(self) -> bool:
        return self("version", check=False).returncode == 0


def docker() -> Docker:
    """The daemon's client, whether or not it is running yet."""
    out = subprocess.run([str(DOCKERD), "host"], check=True, capture_output=True, text=True)
    return Docker(out.stdout.strip())


def build_image() -> str:
    """Build (or find up to date) the operator image with `make image`'s script; its name."""
    proc = subprocess.run([str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        raise AssertionError(f"scripts/image.sh failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1]


def stop_docker() -> None:
    subprocess.run([str(DOCKERD), "down"], check=True, capture_output=True, text=True, timeout=120)
