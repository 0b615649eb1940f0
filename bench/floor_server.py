"""Floor servers for `make bench`: the same method path and message types as turnkeeper, no engine.

`echo` parses the TrimHistoryRequest and returns its history unchanged; `suffix` returns the system
rows, a breadcrumb and the rows from the first user row after the oldest three quarters: what a
trim returns, without deciding anything. Both answer ResolveBudget with an empty resolution.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

import grpc
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc

SERVICE = "turnkeeper.v1.HistoryService"
CRUMB = h.ChatMessage(role=h.ROLE_USER, content="[earlier turns omitted]", breadcrumb=True)


def suffix(history: h.History) -> h.History:
    rows = history.chat.messages
    system = 0
    while system < len(rows) and rows[system].role == h.ROLE_SYSTEM:
        system += 1
    cut = max(system, len(rows) * 3 // 4)
    while cut < len(rows) and rows[cut].role != h.ROLE_USER:
        cut += 1
    kept = [*rows[:system], CRUMB, *rows[cut:]]
    return h.History(chat=h.ChatHistory(messages=kept))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["echo", "suffix"], required=True)
    parser.add_argument("--ready-file", required=True)
    args = parser.parse_args()

    async def trim(request: svc.TrimHistoryRequest, context: Any) -> svc.TrimHistoryResponse:
        out = request.history if args.mode == "echo" else suffix(request.history)
        return svc.TrimHistoryResponse(history=out)

    async def resolve(request: svc.ResolveBudgetRequest, context: Any) -> svc.ResolveBudgetResponse:
        return svc.ResolveBudgetResponse()

    handlers = {
        "TrimHistory": grpc.unary_unary_rpc_method_handler(
            trim, svc.TrimHistoryRequest.FromString, svc.TrimHistoryResponse.SerializeToString
        ),
        "ResolveBudget": grpc.unary_unary_rpc_method_handler(
            resolve,
            svc.ResolveBudgetRequest.FromString,
            svc.ResolveBudgetResponse.SerializeToString,
        ),
    }
    server = grpc.aio.server(
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", 256 << 20),
            ("grpc.max_send_message_length", 256 << 20),
        ]
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tmp = Path(args.ready_file + ".tmp")
    tmp.write_text(json.dumps({"tcp": [f"127.0.0.1:{port}"], "pid": os.getpid()}))  # noqa: ASYNC240
    os.replace(tmp, args.ready_file)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
