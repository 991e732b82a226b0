"""What makes the dashboard safe to expose: the middleware in front of every route (app.create_app stacks them:
SecurityHeaders, then Starlette's TrustedHostMiddleware, then GuardMiddleware).

- allowed hosts (TrustedHostMiddleware): a request whose Host is not one of them is refused (DNS rebinding), as
  `kubectl proxy --accept-hosts` does;
- with `--auth kubeconfig`, a token as Jupyter Server has it: printed at start in a URL, kept in an HttpOnly cookie,
  required on every request (any page on the machine can reach 127.0.0.1);
- no state change from another origin: a POST must carry the page's CSRF token (a header htmx sends, `hx-headers`
  on <body>), and a browser's Origin and Sec-Fetch-Site must say it came from the dashboard's own origin;
- the security headers on every answer: a Content-Security-Policy with no inline script and no framing,
  nosniff, no referrer.

Why our own token, not starlette-csrf or asgi-csrf: starlette-csrf's double-submit cookie must be readable by
scripts (not HttpOnly); asgi-csrf lets a POST without cookies through, which is the very request a browser
sends cross-site behind HTTP basic auth (the role's nginx). Ours is an HMAC of who asks (the proxied user, or the
kubeconfig's session) under a secret of this process: the page carries it, another origin cannot read it.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
from urllib.parse import urlencode, urlsplit

from starlette.datastructures import URL, Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
TOKEN_COOKIE = "mpiplat-dashboard-token"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/healthz"})  # no token: says "ok" and nothing else
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# A report's own HTML (its inline style) in a sandbox: no script, an origin of its own, never framed.
REPORT_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin"}


class Guard:
    """The token and the CSRF secret of one dashboard process."""

    def __init__(self, token: str | None):
        self.token = token  # None: no token (behind the identity-passing proxy, which authenticates)
        self.secret = secrets.token_bytes(32)

    def csrf_token(self, who: str) -> str:
        """The CSRF token of the pages that `who` is served (the proxy's user, or the kubeconfig's session)."""
        return hmac.new(self.secret, who.encode(), hashlib.sha256).hexdigest()

    def login_url(self, base: str, path: str = "/") -> str:
        return f"{base.rstrip('/')}{path}?{urlencode({'token': self.token})}" if self.token else base + path

    def has_token(self, request: Request) -> bool:
        given = request.cookies.get(TOKEN_COOKIE) or ""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("token "):
            given = auth[6:].strip()
        return bool(self.token) and hmac.compare_digest(given.encode(), self.token.encode())

    def cross_site(self, request: Request) -> str:
        """Why a state-changing request did not come from the dashboard's own origin ("" when it did)."""
        site = request.headers.get("sec-fetch-site")
        if site and site not in ("same-origin", "none"):
            return f"Sec-Fetch-Site is {site}"
        origin = request.headers.get("origin")
        if origin is not None:
            if origin == "null" or urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
                return f"Origin {origin} is not this dashboard's ({request.headers.get('host', '')})"
        return ""


def refusal(status: int, title: str, text: str) -> Response:
    body = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{status} · mpiplat</title>"
            f"</head><body><h1>{status} {html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>")
    return HTMLResponse(body, status_code=status)


class SecurityHeaders:
    """The security headers on every answer (a refusal's too): the outermost middleware."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        csp = REPORT_CSP if path.startswith("/reports/") and "/files/" in path else CSP

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = Headers(raw=message.get("headers") or [])
                extra = [(k.lower().encode(), v.encode()) for k, v in
                         {"Content-Security-Policy": csp, **HEADERS}.items() if k not in have]
                message = {**message, "headers": list(message.get("headers") or []) + extra}
            await send(message)
        await self.app(scope, receive, with_headers)


class GuardMiddleware:
    """Refuses what the Guard does not allow: inside the Host check, so that a foreign Host gets no cookie."""

    def __init__(self, app: ASGIApp, guard: Guard, who):
        self.app, self.guard, self.who = app, guard, who  # who(request) -> the identity a CSRF token is bound to

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.check(Request(scope)) if scope["type"] == "http" else None
        await (refused or self.app)(scope, receive, send)

    def check(self, request: Request) -> Response | None:
        g = self.guard
        if request.url.path in OPEN_PATHS:
            return None
        if g.token is not None:
            given = request.query_params.get("token")
            if given is not None and request.method in SAFE_METHODS:
                if not hmac.compare_digest(given.encode(), g.token.encode()):
                    return refusal(403, "Wrong token", "the token in the URL is not this dashboard's: open the URL "
                                   "that `mpiplat dashboard` printed")
                rest = URL(str(request.url)).remove_query_params("token")
                answer = RedirectResponse(rest.path + (f"?{rest.query}" if rest.query else ""), status_code=303)
                answer.set_cookie(TOKEN_COOKIE, g.token, httponly=True, samesite="strict",
                                  secure=request.url.scheme == "https")
                return answer
            if not g.has_token(request):
                return refusal(401, "Token needed", "this dashboard acts as your kubeconfig's user and needs its "
                               "token: open the URL (with ?token=) that `mpiplat dashboard` printed")
        if request.method not in SAFE_METHODS:
            why = g.cross_site(request)
            if why:
                return refusal(403, "Cross-site request refused", f"{why}: a change is accepted from the "
                               "dashboard's own pages only")
            sent = request.headers.get(CSRF_HEADER, "")
            if not hmac.compare_digest(sent.encode(), g.csrf_token(self.who(request)).encode()):
                return refusal(403, "CSRF token missing or wrong", f"no valid {CSRF_HEADER} header: a change is "
                               "accepted from the dashboard's own pages only (reload the page and try again)")
        return None
