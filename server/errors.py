"""The one exception tree of the server. Each error knows its HTTP status, its B3OS code, the
offending parameter (a dotted path) and how long to wait before retrying; the protocol encoders
render it, so a handler only ever raises.

    InferError
    ├── InvalidRequest                400 invalid_request
    │   ├── UnsupportedParameter      400 unsupported_parameter
    │   ├── ContextLengthExceeded     400 context_length_exceeded
    │   ├── PreviousResponseNotFound  400 previous_response_not_found
    │   └── ConstraintRejected        400 invalid_request
    ├── Unauthorized                  401 unauthorized           (before the infer layer)
    ├── Forbidden                     403 forbidden              (before the infer layer)
    ├── EgressDenied                  403 egress_denied
    ├── RouteNotFound                 404 not_found              (before the infer layer)
    ├── ModelNotAvailable             404 model_not_available
    ├── MethodNotAllowed              405 method_not_allowed     (before the infer layer)
    ├── PayloadTooLarge               413 payload_too_large      (before the infer layer)
    ├── UnsupportedMediaType          415 unsupported_media_type
    ├── RateLimited                   429 rate_limited
    │   ├── ConcurrencyLimited        429 concurrency_limited
    │   └── QuotaExceeded             429 quota_exceeded         (a key's spend cap)
    ├── InternalError                 500 internal
    └── BackendUnavailable            503 infer_backend_unavailable
        └── CapacityUnavailable       503 capacity_unavailable   (the gateway is at capacity)
"""

from __future__ import annotations

from typing import ClassVar


class InferError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    anthropic_type: ClassVar[str] = "api_error"
    openai_type: ClassVar[str] = "server_error"
    # Raised before the request reaches the infer layer: the OpenAI shape on every route.
    before_infer: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        retry_after: int | None = None,
        headers: dict[str, str] | None = None,
        details: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.details = details  # Anthropic's `error.details`, which SDKs act on
        self.retry_after = retry_after
        self.extra_headers = headers or {}  # e.g. RateLimit-*, WWW-Authenticate

    def headers(self) -> dict[str, str]:
        retry = {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}
        return {**self.extra_headers, **retry}


class InvalidRequest(InferError):
    status, code = 400, "invalid_request"
    anthropic_type = openai_type = "invalid_request_error"


class UnsupportedParameter(InvalidRequest):
    code = "unsupported_parameter"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class PreviousResponseNotFound(InvalidRequest):
    """A Responses request continues no kept response: OpenAI's code, on which proxies in front
    of the API resend the whole conversation."""

    code = "previous_response_not_found"


class ConstraintRejected(InvalidRequest):
    """The runtime could not compile a request's grammar (a JSON Schema xgrammar cannot express).
    Raised by engines with the compiler's reason; the generation names the schema."""


class Unauthorized(InferError):
    status, code, before_infer = 401, "unauthorized", True
    anthropic_type = openai_type = "authentication_error"


class Forbidden(InferError):
    status, code, before_infer = 403, "forbidden", True
    anthropic_type = openai_type = "permission_error"


class EgressDenied(InferError):
    status, code = 403, "egress_denied"
    anthropic_type, openai_type = "permission_error", "permission_error"


class RouteNotFound(InferError):
    status, code, before_infer = 404, "not_found", True
    anthropic_type, openai_type = "not_found_error", "invalid_request_error"


class ModelNotAvailable(InferError):
    status, code = 404, "model_not_available"
    anthropic_type, openai_type = "not_found_error", "invalid_request_error"


class MethodNotAllowed(InferError):
    status, code, before_infer = 405, "method_not_allowed", True
    anthropic_type = openai_type = "invalid_request_error"


class PayloadTooLarge(InferError):
    status, code, before_infer = 413, "payload_too_large", True
    anthropic_type, openai_type = "request_too_large", "invalid_request_error"


class UnsupportedMediaType(InferError):
    status, code = 415, "unsupported_media_type"
    anthropic_type = openai_type = "invalid_request_error"


class RateLimited(InferError):
    status, code = 429, "rate_limited"
    anthropic_type = openai_type = "rate_limit_error"


class ConcurrencyLimited(RateLimited):
    code = "concurrency_limited"


class QuotaExceeded(RateLimited):
    code = "quota_exceeded"


class InternalError(InferError):
    """Never carries exception text: the message names the request id only."""

    @classmethod
    def for_request(cls, request_id: str) -> InternalError:
        return cls(f"internal error (request {request_id})")


def public(error: InferError, request_id: str) -> InferError:
    """The error as a client may see it: a 500 says only which request failed."""
    return InternalError.for_request(request_id) if error.code == InternalError.code else error


class BackendUnavailable(InferError):
    status, code = 503, "infer_backend_unavailable"
    anthropic_type, openai_type = "overloaded_error", "server_error"


class CapacityUnavailable(BackendUnavailable):
    code = "capacity_unavailable"
