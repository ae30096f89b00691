"""Tokens reviewed for the audience `vigil` (issue 37, item 4; vigil/kube/kits/accessreview.py).

The TokenReviews adapter against a stand-in for the API server's authentication API: every
review asks for the configured audiences (`spec.audiences`), and an answer that authenticates
the token for none of them (an authenticator that ignores audiences answers with the API
server's own) is a refusal, as is an unauthenticated one. The real API server's answers are
checked in tests/integration/test_http_access.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from vigil.core.access import User
from vigil.kube.kits.accessreview import TokenReviews
from vigil.settings import Settings

API_SERVER_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


class AuthenticationApi:
    """Answers every TokenReview as authenticated for `audiences`, and keeps what it was asked."""

    def __init__(self, audiences: list[str] | None, *, authenticated: bool = True) -> None:
        self.audiences = audiences
        self.authenticated = authenticated
        self.asked: list[client.V1TokenReview] = []

    def create_token_review(self, review: client.V1TokenReview, **_: Any) -> client.V1TokenReview:
        self.asked.append(review)
        user = client.V1UserInfo(username="system:serviceaccount:ns:reader", uid="u1", groups=["g"])
        status = client.V1TokenReviewStatus(authenticated=self.authenticated, user=user, audiences=self.audiences)
        return client.V1TokenReview(spec=review.spec, status=status)


def reviews(
    monkeypatch: pytest.MonkeyPatch, answer: AuthenticationApi, audiences: tuple[str, ...] = ("vigil",)
) -> TokenReviews:
    adapter = TokenReviews(client.ApiClient(), timeout_seconds=1, audiences=audiences)
    monkeypatch.setattr(adapter, "_api", answer)  # the stand-in for AuthenticationV1Api
    return adapter


@pytest.mark.parametrize(
    ("accepted", "answered", "user"),
    [
        pytest.param(("vigil",), ["vigil"], "system:serviceaccount:ns:reader", id="bound-to-vigil"),
        pytest.param(("vigil",), [API_SERVER_AUDIENCE], None, id="the-api-servers-audience-is-refused"),
        pytest.param(("vigil",), None, None, id="no-audience-in-the-answer-is-refused"),
        pytest.param(("vigil",), [], None, id="an-empty-audience-list-is-refused"),
        pytest.param(
            ("vigil", API_SERVER_AUDIENCE), [API_SERVER_AUDIENCE], "system:serviceaccount:ns:reader",
            id="migration-accepts-the-api-servers-audience-when-listed",
        ),
    ],
)
def test_a_token_is_accepted_only_for_an_audience_asked_for(
    monkeypatch: pytest.MonkeyPatch, accepted: tuple[str, ...], answered: list[str] | None, user: str | None
) -> None:
    api = AuthenticationApi(answered)
    found = reviews(monkeypatch, api, accepted).authenticate("t")
    assert (found.name if isinstance(found, User) else None) == user
    assert api.asked[0].spec.audiences == list(accepted)


def test_an_unauthenticated_answer_is_refused_whatever_its_audiences(monkeypatch: pytest.MonkeyPatch) -> None:
    assert reviews(monkeypatch, AuthenticationApi(["vigil"], authenticated=False)).authenticate("t") is None


def test_no_audience_at_all_is_a_configuration_error() -> None:
    with pytest.raises(ValueError):
        TokenReviews(client.ApiClient(), timeout_seconds=1, audiences=())
    with pytest.raises(ValueError):
        Settings.model_validate({"http": {"tokenAudiences": []}})


def test_the_default_audience_is_vigil() -> None:
    assert Settings().http.token_audiences == ["vigil"]
