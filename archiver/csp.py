"""The admin's and the API's Content-Security-Policy: scripts and styles of this origin
only, no inline script, no service worker, and frames from the replay origin alone.

Archived pages never run on this origin (they are replayed on ARCHIVER_REPLAY_URL); this
policy is what keeps a script that got into an admin page anyway (an XSS) from running, and
the Replay page from framing anything but the replay origin. Inline `style=` attributes
stay allowed: Django's admin uses them, and a style runs no code.
"""

from __future__ import annotations

from archiver import conf


def policy(replay_origin: str) -> str:
    return "; ".join((
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "connect-src 'self'",
        f"frame-src {replay_origin}",
        "worker-src 'none'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ))


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.header = policy(conf.get().replay_url)

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", self.header)
        return response
