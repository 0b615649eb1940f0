"""turnkeeper-client: sync and asyncio clients, format converters and the `turnkeeper` CLI.

The generated messages live in the root `turnkeeper` package (`turnkeeper.v1.*_pb2`).
"""

from ._options import DEFAULT_TIMEOUT, MAX_MESSAGE_BYTES, target, tls_credentials
from ._retry import DEFAULT_RETRY, RETRYABLE_CODES, RetryPolicy
from ._watch import Backoff
from .aio import AsyncTrimWatch, AsyncTurnkeeperClient
from .compaction import apply_compaction
from .convert import (
    ConversionError,
    TurnMarks,
    from_anthropic,
    from_openai,
    from_openai_responses,
    to_anthropic,
    to_openai,
    to_openai_responses,
    turn_marks,
)
from .errors import (
    ClientError,
    FieldViolation,
    PreconditionViolation,
    TurnkeeperError,
    decode_rpc_error,
)
from .sync import TrimWatch, TurnkeeperClient
from .usage import reported_usage

__all__ = [
    "DEFAULT_RETRY",
    "DEFAULT_TIMEOUT",
    "MAX_MESSAGE_BYTES",
    "RETRYABLE_CODES",
    "AsyncTrimWatch",
    "AsyncTurnkeeperClient",
    "Backoff",
    "ClientError",
    "ConversionError",
    "FieldViolation",
    "PreconditionViolation",
    "RetryPolicy",
    "TrimWatch",
    "TurnMarks",
    "TurnkeeperClient",
    "TurnkeeperError",
    "apply_compaction",
    "decode_rpc_error",
    "from_anthropic",
    "from_openai",
    "from_openai_responses",
    "reported_usage",
    "target",
    "tls_credentials",
    "to_anthropic",
    "to_openai",
    "to_openai_responses",
    "turn_marks",
]
