"""Requests that are small on the wire and expand into many parsed objects, hand-encoded (building
them as messages would cost the test what they cost the server): the amplifications the
request-item limit (`--max-request-items`) bounds, and a normal call to send after them.

Shared by bench/bench_expansion.py and the request-limit tests (tests/robustness/test_request_expansion.py,
tests/unit/test_request_limits.py)."""

from __future__ import annotations

from typing import NamedTuple

from turnkeeper.server.contract.methods import method_path
from turnkeeper.server.contract.wire import length_delimited
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc

_field = length_delimited


class Amplification(NamedTuple):
    """One request: its method, its bytes, and the top-level field the limit names."""

    name: str
    method: str
    body: bytes
    field: str

    @property
    def path(self) -> str:
        """The method's full gRPC path."""
        return method_path(self.method)


def _chat_row(row: bytes) -> bytes:
    """A history (field 1) of one chat row."""
    return _field(1, _field(1, _field(1, row)))


def amplifications(scale: float = 1.0) -> list[Amplification]:
    """The amplifications QA found and the others of the same kind; `scale` shrinks them."""
    million = int(1_000_000 * scale)
    calls = b"".join(_field(4, _field(1, b"c%d" % i) + _field(2, b"f")) for i in range(million))
    providers = b"".join(_field(2, _field(1, b"p%d" % i)) for i in range(million))
    routes = b"".join(_field(8, _field(1, b"h%d" % i) + _field(2, b"p")) for i in range(million))
    user_row = _field(1, b"\x08\x02")
    struct_entries = _field(1, b"") * (2 * million)
    return [
        Amplification(
            "CapToolResults 3M empty contents",
            "CapToolResults",
            b"\x0a\x00" * (3 * million),
            "contents",
        ),
        Amplification(
            "SweepOrphans 1M calls", "SweepOrphans", _chat_row(b"\x08\x03" + calls), "history"
        ),
        Amplification(
            "ResolveBudget 1M providers", "ResolveBudget", _field(1, providers), "profiles"
        ),
        Amplification(
            "ResolveBudget 1M routes", "ResolveBudget", _field(1, _field(1, routes)), "profiles"
        ),
        Amplification(
            "EstimateTokens 2M tiny rows",
            "EstimateTokens",
            _field(1, _field(1, user_row * (2 * million))),
            "history",
        ),
        Amplification(
            "EstimateTokens 2M passthrough entries",
            "EstimateTokens",
            _chat_row(b"\x08\x02" + _field(7, struct_entries)),
            "history",
        ),
        Amplification(
            "TrimHistory 3M empty attachments",
            "TrimHistory",
            _chat_row(b"\x08\x04\x1a\x01a" + b"\x2a\x00" * (3 * million)) + b"\x10\x01",
            "history",
        ),
        Amplification(
            "PrepareModelCall 3M empty hook texts",
            "PrepareModelCall",
            _chat_row(b"\x08\x02") + b"\x2a\x00" * (3 * million),
            "hook_texts",
        ),
        Amplification(
            "CheckCapacity 3M empty tool schemas",
            "CheckCapacity",
            _chat_row(b"\x08\x02") + b"\x22\x00" * (3 * million),
            "tool_schemas",
        ),
    ]


def normal_call() -> tuple[str, bytes]:
    """A small EstimateTokens every server answers."""
    history = h.History(
        chat=h.ChatHistory(
            messages=[
                h.ChatMessage(role=h.ROLE_USER, content="hello"),
                h.ChatMessage(role=h.ROLE_ASSISTANT, content="hi"),
            ]
        )
    )
    return "EstimateTokens", svc.EstimateTokensRequest(history=history).SerializeToString()
