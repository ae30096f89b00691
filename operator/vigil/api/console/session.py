"""Who is looking at the console: the bearer token, from an auth proxy's header or the login cookie.

Two ways in, as Argo Server's client mode:

* an auth proxy in front of the operator sets ``Authorization: Bearer ...`` on every request;
* a person pastes a token into the login form; it is kept in a cookie, ``HttpOnly`` (no script
  reads it), ``SameSite=Strict`` (no other site's page sends it), ``Secure`` when the API is
  served over TLS, ``Path=/console`` (the API's own routes never read it) and for at most
  `COOKIE_MAX_AGE_SECONDS`. The header wins when both are there.

Either way the token is reviewed (TokenReview) on each request, as the API's routes review theirs.

Forms that change something (POST) carry a CSRF field, an HMAC of a fixed label keyed with the
viewer's token: another site cannot compute it without the token, and it needs no server-side
state, so every replica accepts what another rendered. A POST is also refused when its
``Origin`` is another host's, or its ``Sec-Fetch-Site`` says it came from another site.

Every console answer carries a strict Content-Security-Policy (scripts, styles and images from
the console itself only; no inline script, no eval, no framing) and asks not to be cached.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse

from vigil.api.exchange import Exchange

COOKIE = "vigil-console"
COOKIE_PATH = "/console"
#: How long a login lasts in the browser, in seconds: a working day. The token's own expiry
#: still applies (the API server stops accepting it), whichever comes first.
COOKIE_MAX_AGE_SECONDS = 8 * 3600
CSRF_FIELD = "csrf"
CSRF_LABEL = b"vigil-console-csrf-v1"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    (
        "Referrer-Policy",
        "same-origin",
    ),  # no-referrer would make Chromium send `Origin: null` on our own forms
    ("Cache-Control", "no-store"),
)


def token_of(exchange: Exchange, header_token: str | None) -> str | None:
    """The viewer's token: the Authorization header's, else the login cookie's."""
    if header_token:
        return header_token
    for part in exchange.header("cookie").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return urllib.parse.unquote(value)
    return None


def login_cookie(token: str, *, tls: bool) -> str:
    secure = "; Secure" if tls else ""
    quoted = urllib.parse.quote(token, safe="")
    return f"{COOKIE}={quoted}; Path={COOKIE_PATH}; Max-Age={COOKIE_MAX_AGE_SECONDS}; HttpOnly; SameSite=Strict{secure}"


def logout_cookie(*, tls: bool) -> str:
    secure = "; Secure" if tls else ""
    return f"{COOKIE}=; Path={COOKIE_PATH}; Max-Age=0; HttpOnly; SameSite=Strict{secure}"


def csrf_token(token: str) -> str:
    """The CSRF field's value for the holder of `token`."""
    return hmac.new(token.encode(), CSRF_LABEL, hashlib.sha256).hexdigest()


def csrf_valid(token: str, given: str) -> bool:
    return hmac.compare_digest(csrf_token(token), given)


def cross_site(exchange: Exchange) -> bool:
    """Whether the browser says this request came from another site (Origin or Sec-Fetch-Site)."""
    fetch_site = exchange.header("sec-fetch-site")
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return True
    origin = exchange.header("origin")
    if not origin or origin == "null":
        return bool(origin)
    return urllib.parse.urlsplit(origin).netloc != exchange.header("host")


def secure(exchange: Exchange) -> None:
    """Put the console's security headers on this answer."""
    exchange.answer_headers.extend(SECURITY_HEADERS)
