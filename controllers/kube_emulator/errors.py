"""API errors and the ``Status`` objects a real API server returns for them.

Every failure inside the server is raised as :class:`ApiError`; the HTTP layer turns it into a
``Status`` body with the same ``code``/``reason``/``details`` layout as kube-apiserver, so clients
(``kubernetes.client.ApiException``, kubectl's error printer) read it the way they read a real one.
"""

from __future__ import annotations

from typing import Any

_REASON_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request the server refuses, carried up to the HTTP layer as a ``Status``."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        *,
        name: str | None = None,
        group: str | None = None,
        kind: str | None = None,
        causes: list[dict[str, str]] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASON_BY_CODE.get(code, "Unknown")
        self.name = name
        self.group = group
        self.kind = kind
        self.causes = causes
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name is not None:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind is not None:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:  # the real server leaves it out for errors from storage
            del body["reason"]
        if details:
            body["details"] = details
        return body


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        f'{_qualified(resource, group)} "{name}" not found',
        name=name,
        group=group,
        kind=resource,
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{_qualified(resource, group)} "{name}" already exists',
        "AlreadyExists",
        name=name,
        group=group,
        kind=resource,
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        "Conflict",
        name=name,
        group=group,
        kind=resource,
    )


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 with one cause per bad field, worded like the real server's field errors."""
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    shown = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        f'{shown} "{name}" is invalid: {summary}',
        "Invalid",
        name=name,
        group=group,
        kind=kind,
        causes=causes,
    )


def field_cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def expired(message: str) -> ApiError:
    return ApiError(410, message, "Expired")


def int_param(query: dict[str, str], name: str, default: int) -> int:
    """A non-negative whole-number query parameter, or 400 naming it."""
    text = query.get(name)
    if text in (None, ""):
        return default
    try:
        value = int(str(text))
    except ValueError as exc:
        raise bad_request(f"{name} must be a whole number, got {text!r}") from exc
    if value < 0:
        raise bad_request(f"{name} must not be negative, got {text!r}")
    return value
