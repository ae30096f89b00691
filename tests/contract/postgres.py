"""A real PostgreSQL server for the contract suite and the history benchmark, from Debian's packages.

`PostgresServer.create()` runs `initdb` into a fresh temporary directory and
starts the server listening only on 127.0.0.1 (a free port) with its unix
socket inside that directory and trust authentication: a throwaway server
nobody else can reach. PostgreSQL refuses to run as root, so when the tests run
as root every server command runs as the `postgres` system user (the Debian
package creates it) and the directory is handed to that user.

`stop()` and `start()` stop and restart the same server on the same data and
port (the history outage test); `drop()` stops it and removes the directory.
The binaries are found on PATH or under /usr/lib/postgresql/<version>/bin,
where scripts/system-deps.sh installs them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

import psycopg
from psycopg import sql

DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
SYSTEM_USER = "postgres"  # the unprivileged user servers run as when we are root
SUPERUSER = "postgres"
START_TIMEOUT_SECONDS = 60
# Tests trade durability for speed: a crashed test server is thrown away anyway.
FAST_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
DURABLE_SETTINGS: Mapping[str, str] = {}  # PostgreSQL's defaults: what a benchmark should measure


def find_bin_dir() -> Path:
    """Where pg_ctl lives: PATH first, else the newest Debian version under /usr/lib/postgresql."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    candidates = [Path(p) for p in glob.glob(DEBIAN_BIN_GLOB) if (Path(p) / "pg_ctl").exists()]
    if not candidates:
        raise RuntimeError("PostgreSQL is not installed (no pg_ctl): run scripts/system-deps.sh")
    return max(candidates, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ensure_system_user() -> None:
    """The unprivileged user to run servers as when we are root (Debian's package creates it)."""
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/sbin/nologin", SYSTEM_USER],
            check=True,
            capture_output=True,
        )


class PostgresServer:
    """One throwaway PostgreSQL cluster in a temporary directory (see the module docstring)."""

    def __init__(self, root: Path, *, port: int, bin_dir: Path) -> None:
        self.root = root
        self.port = port
        self.bin_dir = bin_dir
        self.data = root / "data"
        self.sockets = root / "sockets"
        self.log = root / "server.log"
        self.running = False

    @classmethod
    def create(
        cls, *, settings: Mapping[str, str] = FAST_SETTINGS, bin_dir: Path | None = None
    ) -> PostgresServer:
        """initdb, configure and start a new server."""
        root = Path(tempfile.mkdtemp(prefix="vigil-pg-"))
        server = cls(root, port=free_port(), bin_dir=bin_dir or find_bin_dir())
        try:
            server._init(settings)
            server.start()
        except BaseException:
            server.drop()
            raise
        return server

    @property
    def dsn(self) -> str:
        """SQLAlchemy URL of the default database."""
        return self.database_dsn(SUPERUSER)

    def database_dsn(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def conninfo(self, database: str = SUPERUSER) -> str:
        """libpq connection string, for psycopg directly."""
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.conninfo(), autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.database_dsn(name)

    def start(self) -> None:
        """Start (or restart after stop()) on the same data directory and port."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", str(START_TIMEOUT_SECONDS), "start")  # fmt: skip
        self.running = True

    def stop(self) -> None:
        """Stop now: open connections are cut, as in an outage."""
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            self.running = False

    def drop(self) -> None:
        """Stop the server and delete everything it had."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _init(self, settings: Mapping[str, str]) -> None:
        self.sockets.mkdir()
        if os.geteuid() == 0:
            ensure_system_user()
            shutil.chown(self.root, SYSTEM_USER, SYSTEM_USER)
            shutil.chown(self.sockets, SYSTEM_USER, SYSTEM_USER)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                  "-E", "UTF8", "--no-locale", "--no-sync")  # fmt: skip
        lines = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.sockets}'",
            **settings,
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# vigil test server\n")
            conf.writelines(f"{key} = {value}\n" for key, value in lines.items())

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", SYSTEM_USER, "--", *command]
        result = subprocess.run(command, cwd=self.root, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise subprocess.CalledProcessError(
                result.returncode, command, output=result.stdout, stderr=f"{result.stderr}\n{log}"
            )
