"""`turnkeeper`: estimate, resolve and trim histories on disk; watch trim events.

Exit codes: 0 success, 1 the server returned an error, 2 bad usage or unreadable input,
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from google.protobuf import json_format
from google.protobuf.message import Message
from turnkeeper.v1 import history_pb2, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from . import _render
from ._options import DEFAULT_TIMEOUT, tls_credentials
from ._watch import Backoff
from .convert import (
    DEFAULT_BREADCRUMB,
    ConversionError,
    detect_format,
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
)
from .errors import TurnkeeperError
from .sync import TurnkeeperClient

DEFAULT_ADDRESS = "127.0.0.1:50051"
DISTRIBUTION = "turnkeeper-client"

_MODES = {
    "token-budget": trim_pb2.TRIM_MODE_TOKEN_BUDGET,
    "turn-count": trim_pb2.TRIM_MODE_TURN_COUNT,
    "overflow-recovery": trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY,
    "row-count": trim_pb2.TRIM_MODE_ROW_COUNT,
}
_CALLER_PATHS = {
    "agent": trim_pb2.CALLER_PATH_AGENT,
    "legacy-loop": trim_pb2.CALLER_PATH_LEGACY_LOOP,
    "channel-sender-cache": trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE,
}
_REASONS = {
    "token-budget": trim_pb2.TRIM_REASON_TOKEN_BUDGET,
    "turn-limit": trim_pb2.TRIM_REASON_TURN_LIMIT,
}


class UsageError(Exception):
    """Bad flags or unreadable input: exit code 2."""


def _parser() -> argparse.ArgumentParser:
    connection = argparse.ArgumentParser(add_help=False)
    group = connection.add_argument_group("connection")
    group.add_argument(
        "--address",
        default=os.environ.get("TURNKEEPER_ADDRESS", DEFAULT_ADDRESS),
        help="server host:port (default: $TURNKEEPER_ADDRESS or %(default)s)",
    )
    group.add_argument("--unix", metavar="PATH", help="connect to this Unix socket instead")
    group.add_argument(
        "--tls-ca", metavar="PATH", help="connect with TLS, trusting this PEM CA bundle"
    )
    group.add_argument(
        "--tls", action="store_true", help="connect with TLS, trusting the system roots"
    )
    group.add_argument("--tls-cert", metavar="PATH", help="client certificate (PEM) for mTLS")
    group.add_argument("--tls-key", metavar="PATH", help="private key (PEM) of --tls-cert")
    group.add_argument(
        "--token",
        default=os.environ.get("TURNKEEPER_TOKEN") or None,
        help="bearer token for a server with --auth-tokens (default: $TURNKEEPER_TOKEN)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="per-call deadline (default %(default)s)",
    )
    group.add_argument("--json", action="store_true", help="print proto JSON instead of text")

    source = argparse.ArgumentParser(add_help=False)
    group = source.add_argument_group("input")
    group.add_argument("file", metavar="FILE", help="history JSON file, or - for stdin")
    group.add_argument(
        "--format",
        choices=("auto", "openai", "anthropic", "proto"),
        default="auto",
        help="input format (default: detected)",
    )
    group.add_argument(
        "--shape",
        choices=("chat", "conversation"),
        default="chat",
        help="history shape built from OpenAI/Anthropic input (default %(default)s)",
    )
    group.add_argument(
        "--breadcrumb-text",
        default="",
        metavar="TEXT",
        help="the profile's breadcrumb text: recognised in the input, and used by explicit trims",
    )

    profiles = argparse.ArgumentParser(add_help=False)
    group = profiles.add_argument_group("profiles")
    group.add_argument(
        "--profiles",
        metavar="FILE",
        help="turnkeeper.v1.Profiles in the proto JSON mapping",
    )
    group.add_argument("--hint", metavar="HINT", help="set selection.classifier_hint")
    group.add_argument(
        "--switch",
        metavar="PROVIDER[/MODEL]",
        help="set selection.session_switch",
    )

    parser = argparse.ArgumentParser(
        prog="turnkeeper",
        description="Estimate, resolve and trim LLM histories with a turnkeeper server.",
    )
    parser.add_argument(
        "--version", action="version", version=f"turnkeeper {metadata.version(DISTRIBUTION)}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser(
        "estimate",
        parents=[connection, source],
        help="price a history (OpenAI, Anthropic or proto JSON)",
        description="Price a history with the pinned heuristic, total and per row.",
    )

    resolve = commands.add_parser(
        "resolve",
        parents=[connection, profiles],
        help="resolve route, capacity, budget and turn limit",
        description="Resolve profiles; FILE (or --profiles) is turnkeeper.v1.Profiles JSON.",
    )
    resolve.add_argument("file", metavar="FILE", nargs="?", help="profiles JSON (default: none)")

    trim = commands.add_parser(
        "trim",
        parents=[connection, source, profiles],
        help="trim a history",
        description="Apply one trim. Limits come from --profiles (default profiles when no "
        "limit flag is given) or from --budget/--max-turns/--max-rows.",
    )
    trim.add_argument("--mode", choices=tuple(_MODES), help="default: token-budget")
    trim.add_argument("--caller-path", choices=tuple(_CALLER_PATHS), help="default: agent")
    trim.add_argument("--budget", type=int, metavar="TOKENS", help="explicit token budget")
    trim.add_argument("--max-turns", type=int, metavar="N", help="explicit turn limit (turn-count)")
    trim.add_argument("--max-rows", type=int, metavar="N", help="explicit row limit (row-count)")
    trim.add_argument("--session", help="caller session id (copied into the event)")
    trim.add_argument("--runtime", help="caller runtime id")
    trim.add_argument("--agent", help="caller agent id")
    trim.add_argument("--turn", help="caller turn id")
    trim.add_argument(
        "--emit",
        choices=("openai", "anthropic", "proto"),
        help="print only the trimmed history, in this format (JSON)",
    )

    watch = commands.add_parser(
        "watch",
        parents=[connection],
        help="follow trim events (resumes after disconnects)",
        description="Print one line per event, heartbeat and gap (JSON lines with --json). "
        "On a disconnect it reconnects and resumes from the last cursor.",
    )
    watch.add_argument("--session", action="append", default=[], help="only this session")
    watch.add_argument("--runtime", action="append", default=[], help="only this runtime")
    watch.add_argument(
        "--reason", action="append", default=[], choices=tuple(_REASONS), help="only this reason"
    )
    watch.add_argument("--after", default="", metavar="CURSOR", help="resume after this cursor")
    watch.add_argument(
        "--heartbeat", type=float, metavar="SECONDS", help="heartbeat interval (server: 15)"
    )
    watch.add_argument("--limit", type=int, metavar="N", help="exit after N events")
    return parser


def _read_json(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}: not JSON: {error}") from error


def _parse(data: Any, message: Message, what: str) -> None:
    try:
        json_format.ParseDict(data, message)
    except json_format.ParseError as error:
        raise UsageError(f"{what}: {error}") from error


def _breadcrumbs(args: argparse.Namespace) -> tuple[str, ...]:
    return (
        (DEFAULT_BREADCRUMB, args.breadcrumb_text)
        if args.breadcrumb_text
        else (DEFAULT_BREADCRUMB,)
    )


def _load_input(args: argparse.Namespace) -> tuple[history_pb2.History, Any]:
    """The history, and the raw JSON when it was a proto request (for trim to build on)."""
    data = _read_json(args.file)
    fmt = args.format
    try:
        if fmt == "auto":
            fmt = detect_format(data)
        if fmt == "openai":
            return from_openai(data, shape=args.shape, breadcrumb_texts=_breadcrumbs(args)), None
        if fmt == "anthropic":
            return (
                from_anthropic(data, shape=args.shape, breadcrumb_texts=_breadcrumbs(args)),
                None,
            )
    except ConversionError as error:
        raise UsageError(f"{args.file}: {error}") from error
    if not isinstance(data, dict):
        raise UsageError(f"{args.file}: proto JSON must be an object")
    history = history_pb2.History()
    if "history" in data:
        _parse(data["history"], history, args.file)
        return history, data
    _parse(data, history, args.file)
    return history, None


def _load_profiles(args: argparse.Namespace, path: str | None) -> profile_pb2.Profiles | None:
    profiles: profile_pb2.Profiles | None = None
    if path:
        data = _read_json(path)
        if isinstance(data, dict) and "profiles" in data:
            data = data["profiles"]  # a ResolveBudgetRequest works too
        profiles = profile_pb2.Profiles()
        _parse(data, profiles, path)
    if args.hint or args.switch:
        profiles = profiles or profile_pb2.Profiles()
        if args.hint:
            profiles.selection.classifier_hint = args.hint
        if args.switch:
            provider, _, model = args.switch.partition("/")
            profiles.selection.session_switch.provider = provider
            profiles.selection.session_switch.model = model
    return profiles


def _connect(args: argparse.Namespace) -> TurnkeeperClient:
    try:
        if args.unix:
            return TurnkeeperClient.connect(
                unix_path=args.unix, timeout=args.timeout, token=args.token
            )
        secure = args.tls or args.tls_ca or args.tls_cert or args.tls_key
        credentials = (
            tls_credentials(args.tls_ca, client_cert=args.tls_cert, client_key=args.tls_key)
            if secure
            else None
        )
        return TurnkeeperClient.connect(
            args.address, timeout=args.timeout, credentials=credentials, token=args.token
        )
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from error


def _print_message(args: argparse.Namespace, message: Message, text: str) -> None:
    print(_render.proto_json(message) if args.json else text)


def _cmd_estimate(args: argparse.Namespace) -> int:
    history, _ = _load_input(args)
    with _connect(args) as client:
        response = client.estimate_tokens(svc.EstimateTokensRequest(history=history))
    _print_message(args, response, _render.estimate(history, response))
    return 0


def _cmd_resolve(args: argparse.Namespace) -> int:
    if args.file and args.profiles:
        raise UsageError("give profiles either as FILE or with --profiles")
    profiles = _load_profiles(args, args.file or args.profiles)
    request = svc.ResolveBudgetRequest(profiles=profiles)
    with _connect(args) as client:
        response = client.resolve_budget(request)
    _print_message(args, response, _render.resolution(response.resolution))
    return 0


def _trim_request(args: argparse.Namespace) -> svc.TrimHistoryRequest:
    history, raw_request = _load_input(args)
    request = svc.TrimHistoryRequest()
    if raw_request is not None:
        _parse(raw_request, request, args.file)  # a whole TrimHistoryRequest; flags override
    request.history.CopyFrom(history)
    if args.mode:
        request.mode = _MODES[args.mode]
    elif request.mode == trim_pb2.TRIM_MODE_UNSPECIFIED:
        request.mode = trim_pb2.TRIM_MODE_TOKEN_BUDGET
    if args.caller_path:
        request.caller_path = _CALLER_PATHS[args.caller_path]
    explicit = [v for v in (args.budget, args.max_turns, args.max_rows) if v is not None]
    if any(v < 0 for v in explicit):
        raise UsageError("--budget, --max-turns and --max-rows must not be negative")
    if args.max_turns is not None and args.max_rows is not None:
        raise UsageError("--max-turns and --max-rows set the same limit; give one")
    profiles = _load_profiles(args, args.profiles)
    if explicit and profiles is not None:
        raise UsageError("give limits either with --profiles/--hint/--switch or explicitly")
    if explicit:
        limits = request.explicit_limits
        if args.budget is not None:
            limits.budget_tokens = args.budget
        limit = args.max_turns if args.max_turns is not None else args.max_rows
        if limit is not None:
            limits.max_history_messages = limit
        limits.breadcrumb_text = args.breadcrumb_text
    elif profiles is not None:
        request.profiles.CopyFrom(profiles)
    caller = request.caller
    for field, value in (
        ("session_id", args.session),
        ("runtime_id", args.runtime),
        ("agent_id", args.agent),
        ("turn_id", args.turn),
    ):
        if value:
            setattr(caller, field, value)
    return request


def _cmd_trim(args: argparse.Namespace) -> int:
    request = _trim_request(args)
    with _connect(args) as client:
        response = client.trim_history(request)
    try:
        if args.emit == "openai":
            print(json.dumps(to_openai(response.history), indent=2, ensure_ascii=False))
            return 0
        if args.emit == "anthropic":
            print(json.dumps(to_anthropic(response.history), indent=2, ensure_ascii=False))
            return 0
    except ConversionError as error:
        raise UsageError(f"cannot emit {args.emit}: {error}") from error
    if args.emit == "proto":
        print(_render.proto_json(response.history))
    else:
        _print_message(args, response, _render.trim(response))
    return 0


def _cmd_watch(args: argparse.Namespace) -> int:
    def disconnected(error: TurnkeeperError | None, delay: float) -> None:
        why = str(error) if error is not None else "stream ended"
        print(f"turnkeeper watch: {why}; reconnecting in {delay:.1f}s", file=sys.stderr)

    events = 0
    with _connect(args) as client:
        watch = client.watch_trims(
            session_ids=args.session,
            runtime_ids=args.runtime,
            reasons=[_REASONS[r] for r in args.reason],
            after_cursor=args.after,
            heartbeat_interval=args.heartbeat,
            backoff=Backoff(),
            on_disconnect=disconnected,
        )
        try:
            for item in watch:
                if args.json:
                    print(_render.proto_json(item, indent=None), flush=True)
                else:
                    print(_render.feed_item(item), flush=True)
                if item.WhichOneof("item") == "event":
                    events += 1
                    if args.limit is not None and events >= args.limit:
                        break
        finally:
            watch.close()
            if watch.cursor:
                print(f"turnkeeper watch: resume with --after {watch.cursor}", file=sys.stderr)
    return 0


_COMMANDS = {
    "estimate": _cmd_estimate,
    "resolve": _cmd_resolve,
    "trim": _cmd_trim,
    "watch": _cmd_watch,
}


def _fail(message: str, code: int) -> NoReturn:
    print(f"turnkeeper: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except UsageError as error:
        _fail(str(error), 2)
    except TurnkeeperError as error:
        print(
            _render.error_json(error) if args.json else _render.error_text(error), file=sys.stderr
        )
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `turnkeeper watch | head`: the reader went away; nothing left to say.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
