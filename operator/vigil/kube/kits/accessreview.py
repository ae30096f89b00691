"""The API server's answers to "who is this token?" and "may they?", for the HTTP API.

:class:`TokenReviews` posts a TokenReview (authentication.k8s.io/v1) and :class:`AccessReviews`
a SubjectAccessReview (authorization.k8s.io/v1), exactly as the API server's own delegating
authenticator and authorizer do for aggregated servers. The operator's ServiceAccount needs
`create` on both: the chart binds the built-in ClusterRole system:auth-delegator to it.

The token is reviewed for the operator's own audience, `vigil` by default (settings
`http.tokenAudiences`): the API server accepts it only if the token was minted for one of those
audiences (`kubectl create token SA --audience vigil`, a projected ServiceAccount token with
`audience: vigil`), and a review whose answer names none of them is refused too (an
authenticator that ignores audiences answers with the API server's own). So a token minted for
another server — the API server's default, a kubeconfig's, another operator's — cannot be
replayed here, nor a token sent here replayed elsewhere. A cluster moving to audience-bound
tokens may list the API server's own audience as well, for a while. Client certificates cannot
be reviewed; see docs/security.md.

Every call has a timeout; anything but a review (an API error, a refused connection, a
timeout) raises ReviewUnavailable, which the HTTP API answers with 503, never with access.
"""

from __future__ import annotations

import logging

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from vigil.core.access import Access, ReviewUnavailable, User

log = logging.getLogger(__name__)


class TokenReviews:
    """The Authenticator port through TokenReviews."""

    def __init__(self, api: client.ApiClient, *, timeout_seconds: float, audiences: tuple[str, ...] = ("vigil",)) -> None:
        if not audiences:
            raise ValueError("a token is reviewed for at least one audience")
        self._api = client.AuthenticationV1Api(api)
        self._timeout = timeout_seconds
        self._audiences = audiences

    def authenticate(self, token: str) -> User | None:
        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=list(self._audiences)))
        try:
            answer = self._api.create_token_review(review, _request_timeout=self._timeout)
        except (ApiException, HTTPError, OSError) as error:
            raise ReviewUnavailable(f"TokenReview failed: {_why(error)}") from None
        status = answer.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return None
        if not set(status.audiences or ()) & set(self._audiences):
            log.info("TokenReview: a token accepted for none of the audiences %s is refused", list(self._audiences))
            return None
        info = status.user
        extra = tuple(sorted((key, tuple(values or ())) for key, values in (info.extra or {}).items()))
        return User(name=info.username, uid=info.uid or "", groups=tuple(info.groups or ()), extra=extra)


class AccessReviews:
    """The Authorizer port through SubjectAccessReviews."""

    def __init__(self, api: client.ApiClient, *, timeout_seconds: float) -> None:
        self._api = client.AuthorizationV1Api(api)
        self._timeout = timeout_seconds

    def allowed(self, user: User, access: Access) -> bool:
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user.name,
                uid=user.uid or None,
                groups=list(user.groups) or None,
                extra={key: list(values) for key, values in user.extra} or None,
                resource_attributes=client.V1ResourceAttributes(
                    verb=access.verb,
                    group=access.group,
                    resource=access.resource,
                    subresource=access.subresource or None,
                    namespace=access.namespace or None,
                    name=access.name or None,
                ),
            )
        )
        try:
            answer = self._api.create_subject_access_review(review, _request_timeout=self._timeout)
        except (ApiException, HTTPError, OSError) as error:
            raise ReviewUnavailable(f"SubjectAccessReview failed: {_why(error)}") from None
        status = answer.status
        return status is not None and bool(status.allowed) and not bool(status.denied)


def _why(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    return type(error).__name__
