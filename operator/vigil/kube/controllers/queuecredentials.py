"""Each namespace with a TaskQueue gets its workers' credentials: a database role and a Secret.

The leader's TaskQueue pass hands `sync` the namespaces that have TaskQueues. For each, the
namespace's role (vigil.queue.roles) exists and the Secret `vigil-queue-credentials` in that
namespace holds its DSN (key `dsn`, as `vigil worker` reads VIGIL_QUEUE_DSN); a namespace whose
last TaskQueue is gone loses both. A Secret found missing (deleted by hand, or never written
because the operator stopped between the two) gets a new password: the role's is set anew and
the Secret written, so nothing needs a manual step.

The pass reads each namespace's Secret by name on this leader's first pass and every
`recheck` after (the operator may get, update and delete Secrets of this one name only; it may
create Secrets, which cannot be limited by name), and otherwise trusts what it wrote itself.
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Callable, Set
from datetime import datetime, timedelta
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from vigil.kube.kits.coreapi import CoreApi

log = logging.getLogger(__name__)

SECRET_NAME = "vigil-queue-credentials"
SECRET_KEY = "dsn"
LABEL = "vigil.dev/queue-credentials"
PASSWORD_BYTES = 32


class NamespaceRoles(Protocol):
    """The store's side (vigil.queue.roles.TenantRoles)."""

    def provisioned(self) -> dict[str, str]: ...
    def provision(self, namespace: str, *, password: str) -> str: ...
    def remove(self, namespace: str) -> None: ...


class QueueCredentials:
    """Provision and remove the namespaces' database roles and their DSN Secrets."""

    def __init__(
        self,
        core: CoreApi,
        roles: NamespaceRoles,
        *,
        now: Callable[[], datetime],
        recheck: timedelta = timedelta(minutes=5),
    ) -> None:
        self.core = core
        self.roles = roles
        self.now = now
        self.recheck = recheck
        self._checked_at: datetime | None = None
        self._written: set[str] = set()  # namespaces whose Secret this leader knows is there

    def sync(self, namespaces: Set[str]) -> None:
        """Every namespace in `namespaces` has its role and Secret; no other namespace keeps one."""
        provisioned = self.roles.provisioned()
        now = self.now()
        if self._checked_at is None or now - self._checked_at >= self.recheck:
            self._written = {ns for ns in provisioned if self._secret_there(ns)}
            self._checked_at = now
        for namespace in sorted(namespaces):
            if namespace in provisioned and namespace in self._written:
                continue
            password = secrets.token_urlsafe(PASSWORD_BYTES)
            self._write_secret(namespace, self.roles.provision(namespace, password=password))
            self._written.add(namespace)
            log.info("namespace %s: its database role and Secret %s are ready", namespace, SECRET_NAME)
        for namespace in sorted(set(provisioned) - set(namespaces)):
            self.roles.remove(namespace)
            self._delete_secret(namespace)
            self._written.discard(namespace)
            log.info("namespace %s has no TaskQueue left: its database role and Secret are removed", namespace)

    def _secret_there(self, namespace: str) -> bool:
        try:
            self.core.read_namespaced_secret(SECRET_NAME, namespace)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def _write_secret(self, namespace: str, dsn: str) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": SECRET_NAME,
                "namespace": namespace,
                "labels": {LABEL: "true", "app.kubernetes.io/managed-by": "vigil"},
            },
            "data": {SECRET_KEY: base64.b64encode(dsn.encode()).decode("ascii")},
        }
        try:
            self.core.create_namespaced_secret(namespace, body)
        except ApiException as error:
            if error.status != 409:
                raise
            self.core.replace_namespaced_secret(SECRET_NAME, namespace, body)

    def _delete_secret(self, namespace: str) -> None:
        try:
            self.core.delete_namespaced_secret(SECRET_NAME, namespace)
        except ApiException as error:
            if error.status != 404:
                raise
