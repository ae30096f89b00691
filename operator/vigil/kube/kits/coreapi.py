"""The core/v1 requests the operator makes, sent as plain JSON.

The kubernetes client's generated `CoreV1Api` costs about 20 MiB of resident memory to import
(hundreds of methods, each wrapped in pydantic's argument validation, with a model class for
every answer), a tenth of the operator's budget, and on every call it validates the arguments,
walks the body to serialise it and builds model objects from the answer. The operator makes
nine kinds of core request; this sends them through the same `ApiClient` (its connection pool,
authentication, and the time bound and 429 handling of `vigil.kube.kits.apiclient`) and answers the
decoded JSON, as the custom-object calls already do. A refusal is the client's `ApiException`,
with the status and reason the generated API gives.

The methods keep `CoreV1Api`'s names and argument order, so a caller reads the same and a test
may hand either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException

#: The generated API's keyword arguments and the query parameters they become.
QUERY = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "resource_version": "resourceVersion",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
    "watch": "watch",
    "grace_period_seconds": "gracePeriodSeconds",
    "container": "container",  # a pod's log: which container's
    "tail_lines": "tailLines",
    "follow": "follow",
}
JSON = "application/json"


def _query(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = []
    for name, value in options.items():
        if value is None:
            continue
        if name not in QUERY:
            raise TypeError(f"unexpected argument {name!r}")
        out.append((QUERY[name], str(value).lower() if isinstance(value, bool) else str(value)))
    return out


class CoreApi:
    def __init__(self, api: client.ApiClient) -> None:
        self.api_client = api

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        options: Mapping[str, Any] | None = None,
        preload: bool = True,
        decode: bool = True,
        timeout: Any = None,
    ) -> Any:
        """One request: the decoded answer (None with ``decode=False``: read, then dropped), or
        (``preload=False``) the raw response to read or stream (a watch), which the caller must
        read to its end or close.

        A raw response released with its answer unread must never go back to the pool: the
        next request on that connection would meet the leftover bytes (BadStatusLine,
        ResponseNotReady), and urllib3 would send it again after the API server may already
        have acted on it. So an answer a caller does not need is still read, only not decoded."""
        method, url, headers, _, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=_query(options or {}) or None,
            header_params={"Accept": JSON, "Content-Type": JSON},
            auth_settings=["BearerToken"],
        )
        answer = self.api_client.call_api(
            method, url, header_params=headers, body=body, _request_timeout=timeout
        )
        if not 200 <= answer.status <= 299:
            data = answer.read()
            raise ApiException.from_response(
                http_resp=answer, body=data.decode("utf-8", "replace") if data else None, data=None
            )
        if not preload:
            return answer.response
        data = answer.read()
        return json.loads(data) if data and decode else None

    # -- pods -------------------------------------------------------------------------------------

    def create_namespaced_pod(
        self, namespace: str, body: Mapping[str, Any], *, _preload_content: bool = True
    ) -> Any:
        return self.request(
            "POST",
            f"/api/v1/namespaces/{quote(namespace)}/pods",
            body=body,
            preload=_preload_content,
        )

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> None:
        """A pod created, its answer read off the connection but not decoded: for a caller that
        needs only to know it was made (a refusal is still an `ApiException`)."""
        self.request("POST", f"/api/v1/namespaces/{quote(namespace)}/pods", body=body, decode=False)

    def list_namespaced_pod(self, namespace: str, **options: Any) -> dict[str, Any]:
        listed: dict[str, Any] = self.request(
            "GET", f"/api/v1/namespaces/{quote(namespace)}/pods", options=options
        )
        return listed

    def list_pod_for_all_namespaces(
        self, *, _preload_content: bool = True, _request_timeout: Any = None, **options: Any
    ) -> Any:
        """Every pod the selector picks: the informer's list, and (``watch=True``) its watch."""
        return self.request(
            "GET",
            "/api/v1/pods",
            options=options,
            preload=_preload_content,
            timeout=_request_timeout,
        )

    def delete_namespaced_pod(self, name: str, namespace: str, **options: Any) -> None:
        self.request(
            "DELETE", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", options=options
        )

    # -- the rest ---------------------------------------------------------------------------------

    def create_namespaced_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.request("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=body)

    def read_namespaced_config_map(self, name: str, namespace: str) -> dict[str, Any]:
        found: dict[str, Any] = self.request(
            "GET", f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}"
        )
        return found

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        found: dict[str, Any] = self.request(
            "GET", f"/api/v1/namespaces/{quote(namespace)}/secrets/{quote(name)}"
        )
        return found

    def create_namespaced_secret(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = self.request(
            "POST", f"/api/v1/namespaces/{quote(namespace)}/secrets", body=body
        )
        return made

    def replace_namespaced_secret(
        self, name: str, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        made: dict[str, Any] = self.request(
            "PUT", f"/api/v1/namespaces/{quote(namespace)}/secrets/{quote(name)}", body=body
        )
        return made

    def delete_namespaced_secret(self, name: str, namespace: str) -> None:
        self.request("DELETE", f"/api/v1/namespaces/{quote(namespace)}/secrets/{quote(name)}", decode=False)
