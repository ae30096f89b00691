"""The API server's TokenReview and SubjectAccessReview, stood in for in the HTTP API's pure tests.

The tokens `t-alice` and `t-bob` are the users alice and bob (any other token is nobody); what
each may do is the test's `grants`. `down` makes every review fail as an unreachable API server
does. The real reviews are asked in tests/integration/test_http_access.py and
tests/integration/test_cli_timeline_history.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from vigil.core.access import Access, ReviewUnavailable, User

LEASE = Access(verb="get", group="vigil.dev", resource="leases")


class Reviews:
    def __init__(self, grants: Callable[[User, Access], bool]) -> None:
        self._grants = grants
        self.asked: list[Access] = []
        self.down = False
        self.tokens = {"t-alice": User("alice"), "t-bob": User("bob")}  # a test may add its own

    def authenticate(self, token: str) -> User | None:
        if self.down:
            raise ReviewUnavailable("connection refused")
        return self.tokens.get(token)

    def allowed(self, user: User, access: Access) -> bool:
        self.asked.append(access)
        return self._grants(user, access)


def body(answer: tuple[int, str, bytes]) -> Any:
    return json.loads(answer[2])
