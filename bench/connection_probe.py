"""Connections that never open a call (issue 26 item 4): figures, never pass/fail.

Opens N raw TCP connections to a turnkeeper started with the given flags, each `silent` (sends
nothing), `preface` (the HTTP/2 client preface and an empty SETTINGS) or `acked` (the preface,
SETTINGS, then the SETTINGS ack of the server's SETTINGS, as a well-behaved HTTP/2 peer that
never sends HEADERS does), from `--sources` loopback addresses, then prints how long a new client
(another address) waits for its first call, how many held connections the server closed, and the
server's CPU share over `--idle-seconds` with them all held.

    python bench/connection_probe.py --kind acked --connections 300
    python bench/connection_probe.py --kind acked --connections 1000 --idle-seconds 10 \
        -- --max-connections 2000 --max-connections-per-peer 1200
"""

from __future__ import annotations

import argparse
import resource
import socket
import time

import grpc
from harness import Sidecar, cpu_seconds
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"


def hold(target: tuple[str, int], sources: list[str], n: int, kind: str) -> list[socket.socket]:
    held = []
    for i in range(n):
        sock = socket.socket()
        sock.bind((sources[i % len(sources)], 0))
        sock.connect(target)
        try:  # (past the connection cap grpc closes it at once)
            if kind != "silent":
                sock.sendall(PREFACE + EMPTY_SETTINGS)
            if kind == "acked":
                sock.settimeout(5)
                sock.recv(65536)  # the server's SETTINGS (and WINDOW_UPDATE)
                sock.sendall(SETTINGS_ACK)
        except OSError:
            pass
        sock.setblocking(False)
        held.append(sock)
    return held


def closed(held: list[socket.socket]) -> int:
    count = 0
    for sock in held:
        try:
            while sock.recv(65536):
                pass
            count += 1
        except BlockingIOError:
            pass
        except OSError:
            count += 1
    return count


def time_to_serve(target: str) -> float:
    began = time.monotonic()
    with grpc.insecure_channel(target) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        stub.ResolveBudget(svc.ResolveBudgetRequest(), timeout=180, wait_for_ready=True)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=("silent", "preface", "acked"), default="acked")
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--sources", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=0.0)
    parser.add_argument("flags", nargs="*")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    server = Sidecar(*args.flags)
    try:
        host, port = server.address.rsplit(":", 1)
        sources = [f"127.0.0.{2 + i}" for i in range(args.sources)]
        began = time.monotonic()
        held = hold((host, int(port)), sources, args.connections, args.kind)
        opened = time.monotonic() - began
        right_away = time_to_serve(server.address)
        time.sleep(1.5)
        settled = time_to_serve(server.address)
        print(
            f"{args.connections} {args.kind} connections from {args.sources} address(es) "
            f"(opened in {opened:.1f} s), flags {' '.join(args.flags) or 'default'}: "
            f"new client served after {right_away:.2f} s right away, {settled:.2f} s after "
            f"1.5 s; closed by the server {closed(held)}",
            flush=True,
        )
        if args.idle_seconds:
            cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
            time.sleep(args.idle_seconds)
            share = (cpu_seconds(server.pid) - cpu0) / (time.monotonic() - t0)
            print(
                f"  idle with them held for {args.idle_seconds:.0f} s: server CPU "
                f"{100 * share:.2f} % of a core; still open {len(held) - closed(held)}"
            )
        for sock in held:
            sock.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
