"""Error bodies of the API: one-line ``detail``, 422s naming the field, nothing internal.

Every error is ``{"detail": "..."}``; a 409 adds the task's ``state``; a 422 adds
``errors: [{"field": "steps[0].tool", "message": "..."}]`` and starts ``detail`` with
the field. A body sent without a JSON content type (plain `curl -d '{...}'` sends
`application/x-www-form-urlencoded`) is never read as JSON, so its 422 says to send
`Content-Type: application/json` instead of quoting pydantic. Tracebacks go to the log
only (see `GuardMiddleware`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from signoff.api.schemas import ConflictOut, ErrorOut, ValidationOut
from signoff.errors import StoreError, StoreFull, StoreUnavailable
from signoff.runtime.schedule.durations import parse_duration
from signoff.runtime.text import mask

log = logging.getLogger(__name__)

_LOCATIONS = ("body", "query", "path", "header", "cookie")


class ApiError(Exception):
    """An answer other than 2xx, raised from a handler."""

    def __init__(self, status: int, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.extra = extra

    def response(self) -> JSONResponse:
        """The JSON response; URLs in it masked like every API answer (a refusal may quote
        an action's arguments: "send_webhook to https://h/?token=… failed")."""
        return JSONResponse(mask({"detail": self.detail, **self.extra}), status_code=self.status)


def invalid(field: str, message: str) -> ApiError:
    """A 422 naming one field."""
    return ApiError(422, f"{field}: {message}", errors=[{"field": field, "message": message}])


def duration_field(field: str, text: str) -> timedelta:
    """A duration a request gives in ``field`` ("30m", "2h"); a 422 naming it otherwise."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise invalid(field, str(exc)) from exc


def field_name(loc: Sequence[Any]) -> str:
    """("body", "steps", 0, "tool") → "steps[0].tool"."""
    parts = list(loc[1:] if loc and loc[0] in _LOCATIONS else loc)
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or (str(loc[0]) if loc else "body")


def _describe(error: dict[str, Any]) -> tuple[str, str]:
    kind = error.get("type", "")
    if kind == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "malformed")
        return "body", f"invalid JSON ({reason})"
    field = field_name(error.get("loc", ()))
    message = str(error.get("msg", "invalid value"))
    if kind == "missing" and field == "body":
        message = "a JSON object is required"
    if kind == "extra_forbidden":
        message = "unknown field"
    return field, message


def is_json(content_type: str | None) -> bool:
    """``application/json`` (any parameters) or a ``+json`` media type."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


def _not_json(request: Request, errors: list[dict[str, Any]]) -> str | None:
    """The message for a body that failed only because it was not sent as JSON."""
    sent = request.headers.get("content-type")
    if is_json(sent) or not any(tuple(e.get("loc", ()))[:1] == ("body",) for e in errors):
        return None
    got = sent.split(";", 1)[0].strip() if sent else "no Content-Type"
    return f"send application/json (header Content-Type: application/json), not {got}"


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    wrong_type = _not_json(request, list(exc.errors()))
    if wrong_type:
        return invalid("body", wrong_type).response()
    errors = [_describe(err) for err in exc.errors()]
    detail = "; ".join(f"{field}: {message}" for field, message in errors) or "invalid request"
    return JSONResponse({"detail": detail,
                         "errors": [{"field": f, "message": m} for f, m in errors]},
                        status_code=422)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI answers 400 for a body it cannot even decode (bad UTF-8); the contract
        # treats every malformed body the same way: 422 naming the body.
        return invalid("body", "invalid JSON (cannot be decoded)").response()
    return JSONResponse({"detail": str(exc.detail)}, status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


RETRY_AFTER = "5"  # seconds a client should wait after a 503/507 from a database outage


def store_unavailable(exc: StoreError) -> JSONResponse:
    """The answer while the database is away or cannot write: nothing was applied.

    507 (Insufficient Storage) for a full disk, 503 otherwise, both with ``Retry-After``
    and a JSON ``reason`` a client can act on (``disk_full``, ``read_only``,
    ``database_unavailable``)."""
    reason = getattr(exc, "reason", "database_unavailable")
    words = {"disk_full": "the disk is full", "read_only": "the database is read-only"}
    detail = f"{words.get(reason, 'the database is unavailable')}; nothing was changed, " \
             "try again later"
    return JSONResponse({"detail": detail, "reason": reason},
                        status_code=507 if isinstance(exc, StoreFull) else 503,
                        headers={"Retry-After": RETRY_AFTER})


def store_failed(exc: StoreError, path: str, ctx: Any) -> JSONResponse:
    """A route's database failure: logged, reported to the node's outages (``ctx``, an
    `ApiContext`, or None), answered by `store_unavailable`."""
    log.error("store_unavailable", extra={"path": path, "error": str(exc)})
    if isinstance(exc, StoreUnavailable) and ctx is not None:
        # /health says "down" at once, not at the next heartbeat
        ctx.engine.outages.database_failed(exc)
    return store_unavailable(exc)


def error_response(exc: Exception, path: str, ctx: Any) -> JSONResponse | None:
    """The answer this app gives for an exception a handler raised (an `ApiError`, a
    `StoreError`), or None for any other (a crash: `GuardMiddleware` answers 500). For
    handlers run outside FastAPI's routing (`signoff.api.intake`); FastAPI's own
    exception handlers below give the same answers."""
    if isinstance(exc, ApiError):
        return exc.response()
    if isinstance(exc, StoreError):
        return store_failed(exc, path, ctx)
    return None


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StoreError)
    return store_failed(exc, request.url.path, getattr(request.app.state, "ctx", None))


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(StoreError, _store_error)


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI descriptions of the error answers a route can give."""
    known: dict[int, tuple[type, str]] = {
        401: (ErrorOut, "Missing or wrong API key"),
        403: (ErrorOut, "Not allowed (another site, or not an approver)"),
        404: (ErrorOut, "Unknown task, grant or path"),
        409: (ConflictOut, "The task is not waiting for this decision"),
        413: (ErrorOut, "Request body over 1 MiB"),
        422: (ValidationOut, "Invalid input; the message names the field"),
        503: (ErrorOut, "The database is unavailable; retry after Retry-After seconds"),
        507: (ErrorOut, "The disk is full; retry after Retry-After seconds"),
    }
    return {code: {"model": known[code][0], "description": known[code][1]} for code in codes}
