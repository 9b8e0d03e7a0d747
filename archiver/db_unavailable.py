"""While the database is away (restarting, stopped, unreachable), a request that needs it is
answered 503 with a Retry-After: a JSON error in the API's shape under /api/, a line of plain
text elsewhere (the admin, the replay server), not a 500 with a traceback per request.

The first request after the database is back is answered as usual: the connection is kept
(CONN_MAX_AGE) with CONN_HEALTH_CHECKS, so Django finds it broken before using it and opens a
new one. The API's own handler answers with unavailable() too (crawls/api/errors.py): ninja
handles every exception of its views itself.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse

log = logging.getLogger(__name__)

UNAVAILABLE = (OperationalError, InterfaceError)
CODE = "database_unavailable"
MESSAGE = "the database is unavailable; try again in a few seconds"
RETRY_AFTER = "5"


def unavailable(request) -> HttpResponse:
    log.warning("%s %s: %s", request.method, request.path, MESSAGE)
    if request.path.startswith("/api/"):
        response = JsonResponse({"code": CODE, "message": MESSAGE}, status=503)
    else:
        response = HttpResponse(f"503 Service Unavailable: {MESSAGE}\n", status=503,
                                content_type="text/plain; charset=utf-8")
    response["Retry-After"] = RETRY_AFTER
    return response


class DatabaseUnavailable:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, UNAVAILABLE):
            return None
        return unavailable(request)
