"""The floor server for `make bench`: the same method path and message types as turnkeeper, no engine.

It does the least any server must to answer a trim: a `grpc.aio` server with the generated types
parses the TrimHistoryRequest, cuts the history with `del rows[1:keep]`, inserts the breadcrumb row
at 1, and returns the history with one `CopyFrom` into the response. It prices nothing: the client
gives `keep` in the `floor-keep` metadata (the index of the first row turnkeeper keeps after the
system row), so both servers return the same rows. `echo` mode returns the history unchanged;
`receive` mode takes the request's bytes as they are and answers an empty response (what gRPC's
receive path alone costs, for bench_memory.py). All answer ResolveBudget with an empty resolution.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

import grpc
from harness import BREADCRUMB_ROW, KEEP_METADATA, OPTIONS, SERVICE
from turnkeeper.v1 import history_service_pb2 as svc


def _keep(context: Any) -> int:
    for key, value in context.invocation_metadata() or ():
        if key == KEEP_METADATA:
            return int(value)
    return 1


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["echo", "suffix", "receive"], required=True)
    parser.add_argument("--ready-file", required=True)
    args = parser.parse_args()
    echo = args.mode == "echo"

    async def trim(request: svc.TrimHistoryRequest, context: Any) -> svc.TrimHistoryResponse:
        response = svc.TrimHistoryResponse()
        if not echo:
            rows = request.history.chat.messages
            del rows[1 : _keep(context)]
            rows.insert(1, BREADCRUMB_ROW)
        response.history.CopyFrom(request.history)
        return response

    async def resolve(request: svc.ResolveBudgetRequest, context: Any) -> svc.ResolveBudgetResponse:
        return svc.ResolveBudgetResponse()

    async def receive(request: bytes, context: Any) -> bytes:
        return b""

    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "TrimHistory": (
            grpc.unary_unary_rpc_method_handler(receive)
            if args.mode == "receive"
            else grpc.unary_unary_rpc_method_handler(
                trim, svc.TrimHistoryRequest.FromString, svc.TrimHistoryResponse.SerializeToString
            )
        ),
        "ResolveBudget": grpc.unary_unary_rpc_method_handler(
            resolve,
            svc.ResolveBudgetRequest.FromString,
            svc.ResolveBudgetResponse.SerializeToString,
        ),
    }
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *OPTIONS])
    # Registered, as turnkeeper registers its methods.
    server.add_registered_method_handlers(SERVICE, handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tmp = Path(args.ready_file + ".tmp")
    tmp.write_text(json.dumps({"tcp": [f"127.0.0.1:{port}"], "pid": os.getpid()}))  # noqa: ASYNC240
    os.replace(tmp, args.ready_file)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
