"""What a route may know of its request beyond (method, path, query, token, body), and add to its answer.

The API's routes are plain functions of five values (vigil.api.app). The console's pages need a
little more: the request's ``Cookie``, ``Origin``, ``Host`` and ``Sec-Fetch-Site`` (the login
cookie and the cross-site checks of its forms), whether the connection is TLS (the cookie's
``Secure``), and headers of their own on the answer (``Set-Cookie``, ``Location``,
``Content-Security-Policy``, ``Content-Encoding``). The application puts one `Exchange` in a context variable for each
request; the route's executor thread runs in a copy of that context, so it reads the same object
and the headers it appends reach the answer. Routes that do not look at it lose nothing.
"""

from __future__ import annotations

import contextvars
import dataclasses

#: The request headers an Exchange keeps (lower case): nothing else is copied, so nothing else leaks.
KEPT_HEADERS = ("cookie", "origin", "host", "sec-fetch-site", "content-type", "accept-encoding")


@dataclasses.dataclass
class Exchange:
    """One request's kept headers and TLS flag, and the extra headers its answer carries."""

    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    tls: bool = False
    answer_headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def header(self, name: str) -> str:
        """The request header `name` (lower case), or ""."""
        return self.headers.get(name, "")


EXCHANGE: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar(
    "vigil_exchange", default=None
)


def current() -> Exchange:
    """This request's Exchange (an empty one outside a request, as in unit tests of a route)."""
    found = EXCHANGE.get()
    if found is None:
        found = Exchange()
        EXCHANGE.set(found)
    return found
