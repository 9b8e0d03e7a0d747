"""The API's errors: JSON `{"code": ..., "message": ...}` with the status HTTP means by it.

The message is the sentence the CLI prints for the same refusal (the model's NotAllowed
reason, CrawlConfig's one line...), so a person reading either sees the same words.
"""

from __future__ import annotations

import logging
import math

from django.db import DatabaseError
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from archiver import db_unavailable
from archiver.errors import ActionRefused, ArchiverError, NotAllowed
from crawls.api.schemas import Out

logger = logging.getLogger(__name__)

CODE_FOR_STATUS = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "not_allowed", 416: "range_not_satisfiable",
    422: "invalid", 429: "rate_limited", 503: "storage_unavailable",
}


# What a refused user action (crawls/actions.py) is answered with, by its kind.
STATUS_FOR_REFUSAL = {ActionRefused.STATE: 409, ActionRefused.INVALID: 422, ActionRefused.UNAVAILABLE: 503}


class Error(Out):
    code: str
    message: str


# Every operation documents these, so a client (and schemathesis) knows each can happen.
ERRORS = {status: Error for status in (400, 401, 403, 404, 409, 422, 429)}


class ApiError(Exception):
    """A refusal with its HTTP status; `code` defaults to the status's usual name."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code or CODE_FOR_STATUS[status]
        self.message = message
        self.headers = headers or {}


class DamagedRow(Exception):
    """A row whose stored JSON is not what archiver wrote (a crawl config that is a list...):
    it cannot be shown. A list leaves it out and names it; alone, it is a JSON 500."""

    def __init__(self, kind: str, row_id, cause: Exception):
        super().__init__(f"{kind} {row_id} cannot be shown: its stored data is damaged "
                         f"({type(cause).__name__}); see the server's log")
        self.row_id = str(row_id)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def conflict(message: str) -> ApiError:
    """An action the crawl's (or delivery's) state forbids: the model's reason."""
    return ApiError(409, message)


def invalid(message: str) -> ApiError:
    return ApiError(422, message)


def rate_limited(message: str, wait_seconds: float) -> ApiError:
    return ApiError(429, message, headers={"Retry-After": str(math.ceil(wait_seconds))})


def first_line(exc: ValidationError) -> str:
    """ninja's validation errors as one readable line: `query.limit: Input should be ...`."""
    if not exc.errors:
        return "invalid request"
    error = exc.errors[0]
    # ninja's location starts with where the value came from and our parameter's name
    # (`body.body.scale`); the field alone is what a client sent.
    parts = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path")]
    where = ".".join(parts) or "request body"
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def install_handlers(api: NinjaAPI) -> None:
    def respond(request, status: int, code: str, message: str, headers=None):
        response = api.create_response(request, {"code": code, "message": message}, status=status)
        for name, value in (headers or {}).items():
            response[name] = value
        return response

    @api.exception_handler(ApiError)
    def api_error(request, exc: ApiError):
        return respond(request, exc.status, exc.code, exc.message, exc.headers)

    @api.exception_handler(ActionRefused)
    def refused(request, exc: ActionRefused):
        status = STATUS_FOR_REFUSAL[exc.kind]
        return respond(request, status, CODE_FOR_STATUS[status], exc.message)

    @api.exception_handler(NotAllowed)
    def not_allowed(request, exc: NotAllowed):
        return respond(request, 409, "not_allowed", str(exc))

    @api.exception_handler(ArchiverError)
    def archiver_error(request, exc: ArchiverError):
        # ConfigError, InvalidWebhook...: input the models refuse.
        return respond(request, 422, "invalid", str(exc))

    @api.exception_handler(ValidationError)
    def validation_error(request, exc: ValidationError):
        return respond(request, 422, "invalid", first_line(exc))

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request, exc: AuthenticationError):
        return respond(request, 401, "unauthorized",
                       "send Authorization: Bearer <token> with a valid, unrevoked token "
                       "(archiver token create), or log in to the admin as staff")

    @api.exception_handler(HttpError)
    def http_error(request, exc: HttpError):
        status = exc.status_code
        return respond(request, status, CODE_FOR_STATUS.get(status, "error"), str(exc))

    @api.exception_handler(Http404)
    def missing(request, exc: Http404):
        return respond(request, 404, "not_found", str(exc) or "not found")

    @api.exception_handler(DamagedRow)
    def damaged(request, exc: DamagedRow):
        logger.error("%s (%s %s)", exc, request.method, request.path, exc_info=exc.__cause__)
        return respond(request, 500, "damaged_row", str(exc))

    @api.exception_handler(DatabaseError)
    def database_error(request, exc: DatabaseError):
        if isinstance(exc, db_unavailable.UNAVAILABLE):  # away or restarting: not a bug
            return db_unavailable.unavailable(request)
        return server_error(request, exc)

    @api.exception_handler(Exception)
    def server_error(request, exc: Exception):
        # A bug, not a refusal: logged with its traceback, answered in the API's shape.
        logger.error("unexpected error answering %s %s", request.method, request.path, exc_info=exc)
        return respond(request, 500, "server_error", "the server failed to answer this request; see its log")
