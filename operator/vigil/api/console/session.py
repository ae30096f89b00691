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
the console itself only; no inline script, no eval, no framing); pages ask not to be cached,
the two static files may be kept an hour. Answers are gzipped for browsers that accept it.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import secrets
import urllib.parse

from vigil.api.exchange import Exchange

COOKIE = "vigil-console"
COOKIE_PATH = "/console"
#: How long a login lasts in the browser, in seconds: a working day. The token's own expiry
#: still applies (the API server stops accepting it), whichever comes first.
COOKIE_MAX_AGE_SECONDS = 8 * 3600
#: Longest token the login cookie carries, in characters: browsers keep a cookie of about 4 KiB
#: at most, name and attributes included, and drop a longer one without a word.
COOKIE_TOKEN_MAX = 3800
CSRF_FIELD = "csrf"
CSRF_LABEL = b"vigil-console-csrf-v1"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
#: Referrer-Policy is same-origin, not no-referrer: with no-referrer Chromium sends
#: `Origin: null` on the console's own forms, which the cross-site check refuses.
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
)
#: The static files (the vendored script, the stylesheet) are the same for everyone and change
#: only with the operator's version: a browser keeps them an hour. Pages are never kept.
STATIC_CACHE = "public, max-age=3600"


def token_of(exchange: Exchange, header_token: str | None) -> str | None:
    """The viewer's token: the Authorization header's, else the login cookie's."""
    if header_token:
        return header_token
    for part in exchange.header("cookie").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return urllib.parse.unquote(value)
    return None


#: The one-shot cookie that carries what a POST did to the page it redirects to (Post/Redirect/
#: Get: reloading that page repeats nothing). Its text is the console's own message, cut.
NOTICE_COOKIE = "vigil-console-notice"
NOTICE_MAX = 1500


def notice_cookie(text: str, *, refused: bool, tls: bool) -> str:
    secure = "; Secure" if tls else ""
    value = urllib.parse.quote(("!" if refused else "") + text[:NOTICE_MAX], safe="")
    return f"{NOTICE_COOKIE}={value}; Path={COOKIE_PATH}; Max-Age=60; HttpOnly; SameSite=Strict{secure}"


def take_notice(exchange: Exchange) -> tuple[str, bool]:
    """(the notice a redirecting POST left, whether it was a refusal); the cookie is cleared."""
    for part in exchange.header("cookie").split(";"):
        name, _, value = part.strip().partition("=")
        if name == NOTICE_COOKIE and value:
            secure = "; Secure" if exchange.tls else ""
            exchange.answer_headers.append(
                (
                    "Set-Cookie",
                    f"{NOTICE_COOKIE}=; Path={COOKIE_PATH}; Max-Age=0; HttpOnly; SameSite=Strict{secure}",
                )
            )
            text = urllib.parse.unquote(value)[: NOTICE_MAX + 1]
            return text.removeprefix("!"), text.startswith("!")
    return "", False


def login_cookie(token: str, *, tls: bool) -> str:
    secure = "; Secure" if tls else ""
    quoted = urllib.parse.quote(token, safe="")
    return f"{COOKIE}={quoted}; Path={COOKIE_PATH}; Max-Age={COOKIE_MAX_AGE_SECONDS}; HttpOnly; SameSite=Strict{secure}"


def logout_cookie(*, tls: bool) -> str:
    secure = "; Secure" if tls else ""
    return f"{COOKIE}=; Path={COOKIE_PATH}; Max-Age=0; HttpOnly; SameSite=Strict{secure}"


def _csrf_secret(token: str) -> bytes:
    return hmac.new(token.encode(), CSRF_LABEL, hashlib.sha256).digest()


def csrf_token(token: str, mask: bytes | None = None) -> str:
    """The CSRF field's value for the holder of `token`: the secret XORed with a fresh random
    `mask`, the mask in front. Each page carries a different value, so a compressed page that
    also reflects input (a filter's text) never repeats the secret for BREACH to guess at."""
    secret = _csrf_secret(token)
    mask = mask if mask is not None else secrets.token_bytes(len(secret))
    return (mask + bytes(a ^ b for a, b in zip(mask, secret, strict=True))).hex()


def csrf_valid(token: str, given: str) -> bool:
    secret = _csrf_secret(token)
    try:
        raw = bytes.fromhex(given)
    except ValueError:
        return False
    if len(raw) != 2 * len(secret):
        return False
    mask, masked = raw[: len(secret)], raw[len(secret) :]
    return hmac.compare_digest(bytes(a ^ b for a, b in zip(mask, masked, strict=True)), secret)


def cross_site(exchange: Exchange) -> bool:
    """Whether the browser says this request came from another site (Origin or Sec-Fetch-Site)."""
    fetch_site = exchange.header("sec-fetch-site")
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return True
    origin = exchange.header("origin")
    if not origin or origin == "null":
        return bool(origin)
    return urllib.parse.urlsplit(origin).netloc != exchange.header("host")


#: Pages smaller than this are sent as they are: compressing them saves less than it costs.
GZIP_FROM_BYTES = 1024


def compressed(exchange: Exchange, body: bytes) -> bytes:
    """`body` gzipped (and the answer's headers saying so) when the browser accepts gzip and the
    page is worth it; else `body`. The CSRF field is masked per page (`csrf_token`), so compression
    leaks nothing of it (BREACH)."""
    exchange.answer_headers.append(("Vary", "Accept-Encoding"))
    accepted = {
        part.split(";")[0].strip() for part in exchange.header("accept-encoding").split(",")
    }
    if "gzip" not in accepted or len(body) < GZIP_FROM_BYTES:
        return body
    exchange.answer_headers.append(("Content-Encoding", "gzip"))
    return gzip.compress(body, compresslevel=6)


def secure(exchange: Exchange, *, cached: bool = False) -> None:
    """Put the console's security headers on this answer, and whether a browser may keep it."""
    exchange.answer_headers.extend(SECURITY_HEADERS)
    exchange.answer_headers.append(("Cache-Control", STATIC_CACHE if cached else "no-store"))
