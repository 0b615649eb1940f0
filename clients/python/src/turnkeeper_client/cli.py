"""`turnkeeper`: every RPC of the contract on histories on disk; watch trim events.

Exit codes: 0 success, 1 the server returned an error, 2 bad usage or unreadable input,
3 `check`: the request does not fit, `compact`: there is no plan (the refusal says why),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from google.protobuf import json_format
from google.protobuf.message import Message
from turnkeeper.v1 import history_pb2, profile_pb2, resolution_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from . import _render
from ._options import DEFAULT_TIMEOUT, tls_credentials
from ._watch import Backoff
from .convert import (
    DEFAULT_BREADCRUMB,
    ConversionError,
    Format,
    TurnMarks,
    detect_format,
    from_anthropic,
    from_openai,
    from_openai_responses,
    to_anthropic,
    to_openai,
    to_openai_responses,
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


class TerminatedError(Exception):
    """SIGTERM arrived: end like Ctrl-C (the watch still prints its resume cursor)."""


EXIT_DOES_NOT_FIT = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM


@dataclass(frozen=True)
class Loaded:
    """An input file: its history, the format it was read as, and the JSON itself."""

    history: history_pb2.History
    format: Format
    data: Any

    def proto_request(self) -> dict[str, Any] | None:
        """The whole request, when the file is a proto JSON request (an object with `history`)."""
        if self.format == "proto" and isinstance(self.data, dict) and "history" in self.data:
            return self.data
        return None


def _connection_options() -> argparse.ArgumentParser:
    """Where the server is and how to reach it: every command's."""
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
    return connection


def _source_options() -> argparse.ArgumentParser:
    """The history file a command reads."""
    source = argparse.ArgumentParser(add_help=False)
    group = source.add_argument_group("input")
    group.add_argument("file", metavar="FILE", help="history JSON file, or - for stdin")
    group.add_argument(
        "--format",
        choices=("auto", "openai", "openai_responses", "anthropic", "proto"),
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
    group.add_argument(
        "--summary-row",
        action="store_true",
        help="OpenAI/Anthropic input: the first message after the system messages is the summary "
        "row (spec §15.2), which provider JSON cannot mark",
    )
    group.add_argument(
        "--pin-turn",
        type=_uint32,
        action="append",
        default=[],
        metavar="N",
        help="OpenAI/Anthropic input: pin turn N (0-based, spec §15.1), repeatable",
    )
    return source


def _profile_options() -> argparse.ArgumentParser:
    """The profiles and the route selection."""
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
    return profiles


def _caller_options() -> argparse.ArgumentParser:
    """Who is calling, copied into the events."""
    caller = argparse.ArgumentParser(add_help=False)
    group = caller.add_argument_group("caller (copied into events)")
    group.add_argument("--session", help="caller session id")
    group.add_argument("--runtime", help="caller runtime id")
    group.add_argument("--agent", help="caller agent id")
    group.add_argument("--turn", help="caller turn id")
    return caller


def _extras_options() -> argparse.ArgumentParser:
    """What the provider request carries besides the history."""
    extras = argparse.ArgumentParser(add_help=False)
    group = extras.add_argument_group("what else the provider request carries (pre-flight)")
    group.add_argument(
        "--hook-text", action="append", default=[], metavar="TEXT", help="hook text, repeatable"
    )
    group.add_argument(
        "--tool-schema",
        action="append",
        default=[],
        metavar="FILE",
        help="a tool's JSON schema, as sent to the provider, repeatable",
    )
    group.add_argument(
        "--reserved-output", type=int, metavar="TOKENS", help="output tokens reserved for the reply"
    )
    return extras


def _emit_option() -> argparse.ArgumentParser:
    """Printing the resulting history instead of the report."""
    emit = argparse.ArgumentParser(add_help=False)
    emit.add_argument(
        "--emit",
        choices=("openai", "openai_responses", "anthropic", "proto"),
        help="print only the resulting history, in this format (JSON); a request read in the "
        "same format keeps its other fields (model, max_tokens, tools, ...)",
    )
    return emit


class _Options:
    """The option groups the commands share, built once."""

    def __init__(self) -> None:
        self.connection = _connection_options()
        self.source = _source_options()
        self.profiles = _profile_options()
        self.caller = _caller_options()
        self.extras = _extras_options()
        self.emit = _emit_option()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnkeeper",
        description="Estimate, resolve, trim and prepare LLM histories with a turnkeeper server.",
    )
    parser.add_argument(
        "--version", action="version", version=f"turnkeeper {metadata.version(DISTRIBUTION)}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    options = _Options()
    _add_history_commands(commands, options)
    _add_tool_commands(commands, options)
    _add_watch_command(commands, options)
    return parser


_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_history_commands(commands: _Commands, options: _Options) -> None:
    """estimate, resolve, trim, prepare and check: the commands on a history and its budget."""
    connection, source, profiles = options.connection, options.source, options.profiles
    caller, extras, emit = options.caller, options.extras, options.emit
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
    _runtime_flags(resolve)

    trim = commands.add_parser(
        "trim",
        parents=[connection, source, profiles, caller, emit],
        help="trim a history",
        description="Apply one trim. Limits come from --profiles (default profiles when no "
        "limit flag is given) or from --budget/--max-turns/--max-rows.",
    )
    trim.add_argument("--mode", choices=tuple(_MODES), help="default: token-budget")
    trim.add_argument("--caller-path", choices=tuple(_CALLER_PATHS), help="default: agent")
    trim.add_argument("--budget", type=int, metavar="TOKENS", help="explicit token budget")
    trim.add_argument("--max-turns", type=int, metavar="N", help="explicit turn limit (turn-count)")
    trim.add_argument("--max-rows", type=int, metavar="N", help="explicit row limit (row-count)")
    _runtime_flags(trim)

    prepare = commands.add_parser(
        "prepare",
        parents=[connection, source, profiles, caller, extras, emit],
        help="prepare a history for one provider call (PrepareModelCall)",
        description="Resolve, sweep orphans, apply the turn limit and the budget trim (or "
        "overflow recovery), insert the breadcrumb and run the capacity pre-flight, in one call. "
        "A request that cannot fit fails with the capacity report (exit 1).",
    )
    prepare.add_argument(
        "--overflow-recovery",
        action="store_true",
        help="the provider rejected the last call as too long: recover instead of trimming",
    )
    _runtime_flags(prepare)

    _add_compact_command(commands, options)

    commands.add_parser(
        "check",
        parents=[connection, source, profiles, extras],
        help="capacity pre-flight of a prepared request (CheckCapacity)",
        description="Does the request fit the model's capacity? Exit 0 when it fits, 3 when not.",
    )


def _add_compact_command(commands: _Commands, options: _Options) -> None:
    compact = commands.add_parser(
        "compact",
        parents=[
            options.connection,
            options.source,
            options.profiles,
            options.caller,
            options.extras,
        ],
        help="plan a compaction of a history (PlanCompaction)",
        description="What to condense instead of dropping it (spec §15.3): the plan and its "
        "summary request, or why there is none (exit 3). The server never calls a model: send "
        "the summary request (--emit prints it) and apply the plan with the answer.",
    )
    compact.add_argument(
        "--summarizer-provider",
        metavar="ALIAS",
        help="the summarizer's route: summarizer_selection.session_switch.provider (default: the "
        "call's own route)",
    )
    compact.add_argument(
        "--summarizer-model", metavar="MODEL", help="summarizer_selection.session_switch.model"
    )
    compact.add_argument(
        "--summary-output-tokens",
        type=int,
        metavar="TOKENS",
        help="output tokens reserved for the summary (server default 2,000)",
    )
    compact.add_argument(
        "--instruction",
        metavar="TEXT",
        help="the user row ending the summary request (default: the runtime profile's "
        "summary_instruction, else the spec's text)",
    )
    compact.add_argument(
        "--min-saved-tokens",
        type=int,
        metavar="TOKENS",
        help="refuse a plan that saves less (NO_SAVING; default 0)",
    )
    compact.add_argument(
        "--emit",
        choices=("openai", "openai_responses", "anthropic", "proto"),
        help="print only the plan's summary request, in this format (JSON)",
    )
    _runtime_flags(compact)


def _add_tool_commands(commands: _Commands, options: _Options) -> None:
    """sweep, cap and classify: the commands on tool exchanges and provider errors."""
    connection, profiles, source, emit = (
        options.connection,
        options.profiles,
        options.source,
        options.emit,
    )
    commands.add_parser(
        "sweep",
        parents=[connection, source, emit],
        help="remove orphaned tool calls and results (SweepOrphans)",
        description="Remove tool results without a call and tool calls without a result, and "
        "report each removal.",
    )

    cap = commands.add_parser(
        "cap",
        parents=[connection, profiles],
        help="cap tool-result texts (CapToolResults)",
        description="Cap each tool result to max_tool_result_chars (head 2/3 + tail, never "
        "splitting an [IMAGE:...] marker). The limit comes from --max-chars or --profiles.",
    )
    cap.add_argument(
        "results",
        nargs="+",
        metavar="FILE",
        help="a tool result's text, one file each (- for stdin)",
    )
    cap.add_argument("--max-chars", type=int, metavar="N", help="max_tool_result_chars")

    classify = commands.add_parser(
        "classify",
        parents=[connection],
        help="is a provider error a context-window overflow? (ClassifyProviderError)",
        description="Classify a provider's error message: exit 0 either way; the verdict, the "
        "matched phrase and where it came from are printed.",
    )
    classify.add_argument(
        "message", metavar="MESSAGE", help="the provider's error text (- for stdin)"
    )
    classify.add_argument("--http-status", type=int, metavar="CODE", help="the HTTP status")
    classify.add_argument("--provider", default="", help="the provider alias")


def _add_watch_command(commands: _Commands, options: _Options) -> None:
    """watch: following the trim events."""
    watch = commands.add_parser(
        "watch",
        parents=[options.connection],
        help="follow trim events (resumes after disconnects)",
        description="Print one line per event, heartbeat and gap (JSON lines with --json). "
        "On a disconnect it reconnects and resumes from the last cursor; on Ctrl-C or SIGTERM "
        "it prints that cursor (to pass as --after) before it exits.",
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


def _runtime_flags(command: argparse.ArgumentParser) -> None:
    """The runtime-profile knobs resolve, trim and prepare take (each sets the explicit limits
    when they are given, else the runtime profile)."""
    command.add_argument(
        "--low-water",
        type=float,
        metavar="L",
        help="history_trim_low_water (spec §11): cut on a grid of budget - floor(budget x L) "
        "tokens so the prompt-cache prefix holds; in (0, 1], 1 is the minimal cut. Sets the "
        "explicit limits when they are given, else the runtime profile",
    )
    command.add_argument(
        "--keep-tool-context-turns",
        type=_uint32,
        metavar="K",
        help="keep_tool_context_turns (spec §13.1): the completed turns before the running one "
        "whose tool calls and results prepare still sends; older turns are collapsed to their "
        "prompt, a tool-exchange summary and their reply. Server default 2; trim never collapses",
    )
    command.add_argument(
        "--keep-running-turn-tool-results",
        type=_uint32,
        metavar="R",
        help="keep_running_turn_tool_results (spec §13.4): when the running turn alone exceeds "
        "the budget, prepare clears its oldest tool results, never the newest R. Unset keeps "
        "the running turn whole; trim never clears",
    )


def _uint32(text: str) -> int:
    """A count for a uint32 field: a clear usage error rather than a failed proto assignment."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, {2**32 - 1}]: {value}")
    return value


def _read_text(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from error


def _read_json(path: str) -> Any:
    text = _read_text(path)
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


def _load_input(args: argparse.Namespace) -> Loaded:
    data = _read_json(args.file)
    marks = TurnMarks(args.summary_row, tuple(sorted(set(args.pin_turn))))
    try:
        fmt: Format = detect_format(data) if args.format == "auto" else args.format
        options: dict[str, Any] = {
            "shape": args.shape,
            "breadcrumb_texts": _breadcrumbs(args),
            "marks": marks,
        }
        if fmt == "openai":
            return Loaded(from_openai(data, **options), fmt, data)
        if fmt == "openai_responses":
            return Loaded(from_openai_responses(data, **options), fmt, data)
        if fmt == "anthropic":
            return Loaded(from_anthropic(data, **options), fmt, data)
    except ConversionError as error:
        raise UsageError(f"{args.file}: {error}") from error
    if marks != TurnMarks():
        raise UsageError(
            "--summary-row and --pin-turn are for provider JSON: proto JSON marks rows"
        )
    if not isinstance(data, dict):
        raise UsageError(f"{args.file}: proto JSON must be an object")
    history = history_pb2.History()
    _parse(data.get("history", data), history, args.file)
    return Loaded(history, "proto", data)


def _request_from(args: argparse.Namespace, loaded: Loaded, request: Message) -> None:
    """Fills `request` from a proto JSON request file (flags then override), and its history."""
    whole = loaded.proto_request()
    if whole is not None:
        _parse(whole, request, args.file)
    request.history.CopyFrom(loaded.history)  # type: ignore[attr-defined]


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


_RUNTIME_FLAGS = (
    ("low_water", "history_trim_low_water"),
    ("keep_tool_context_turns", "keep_tool_context_turns"),
    ("keep_running_turn_tool_results", "keep_running_turn_tool_results"),
)
"""Each flag of `_runtime_flags` and the RuntimeProfile / ExplicitLimits field it sets."""


def _set_runtime_flags(
    args: argparse.Namespace,
    request: (
        svc.ResolveBudgetRequest
        | svc.TrimHistoryRequest
        | svc.PrepareModelCallRequest
        | svc.PlanCompactionRequest
    ),
) -> None:
    """--low-water, --keep-tool-context-turns and --keep-running-turn-tool-results into the
    explicit limits when the request has them, else into the runtime profile (the defaults when
    no profiles were given: unset profiles resolve to the same)."""
    for flag, field in _RUNTIME_FLAGS:
        value = getattr(args, flag)
        if value is None:
            continue
        if isinstance(request, svc.TrimHistoryRequest) and request.HasField("explicit_limits"):
            setattr(request.explicit_limits, field, value)
        else:
            setattr(request.profiles.runtime, field, value)


def _set_caller(args: argparse.Namespace, caller: trim_pb2.CallerContext) -> None:
    for field, value in (
        ("session_id", args.session),
        ("runtime_id", args.runtime),
        ("agent_id", args.agent),
        ("turn_id", args.turn),
    ):
        if value:
            setattr(caller, field, value)


def _set_extras(
    args: argparse.Namespace,
    request: svc.PrepareModelCallRequest | svc.CheckCapacityRequest | svc.PlanCompactionRequest,
) -> None:
    """Hook texts, tool schemas and reserved output, added to what a request file gave."""
    if args.reserved_output is not None:
        if args.reserved_output < 0:
            raise UsageError("--reserved-output must not be negative")
        request.reserved_output_tokens = args.reserved_output
    request.hook_texts.extend(args.hook_text)
    request.tool_schemas.extend(_read_text(path) for path in args.tool_schema)


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


def _with_request_fields(fmt: Format, converted: Any, loaded: Loaded) -> Any:
    """The converted history inside the input request's other fields (model, max_tokens, tools,
    ...) when the input was a request object of the format emitted; else the history alone."""
    if loaded.format != fmt or not isinstance(loaded.data, dict):
        return converted
    out = dict(loaded.data)
    if fmt == "openai":
        out["messages"] = converted
        return out
    if fmt == "openai_responses":
        out["input"] = converted
        return out
    out.pop("system", None)  # the converted history says whether there is one
    out.update(converted)
    return out


_EXPORTERS: dict[str, Callable[[history_pb2.History], Any]] = {
    "openai": to_openai,
    "openai_responses": to_openai_responses,
    "anthropic": to_anthropic,
}


def _emit(
    args: argparse.Namespace,
    history: history_pb2.History,
    loaded: Loaded,
    prepared: svc.PrepareModelCallResponse | None = None,
    profiles: profile_pb2.Profiles | None = None,
) -> None:
    """Prints the history in the --emit format; a prepared Anthropic request carries the
    preparation's cache breakpoints with the route's cache lifetime (spec §14)."""
    if args.emit == "proto":
        print(_render.proto_json(history))
        return
    try:
        if args.emit == "anthropic" and prepared is not None:
            converted: Any = to_anthropic(
                history,
                cache_breakpoints=prepared.cache_breakpoints,
                cache_lifetime=_cache_lifetime(prepared.resolution.route, profiles),
            )
        else:
            converted = _EXPORTERS[args.emit](history)
    except ConversionError as error:
        raise UsageError(f"cannot emit {args.emit}: {error}") from error
    output = _with_request_fields(args.emit, converted, loaded)
    print(json.dumps(output, indent=2, ensure_ascii=False))


def _cache_lifetime(
    route: resolution_pb2.Route, profiles: profile_pb2.Profiles | None
) -> profile_pb2.CacheLifetime.ValueType:
    """The route's provider profile's cache lifetime, under the rule of its other model metadata
    (the profile's `model` empty or the route's)."""
    for provider in profiles.providers if profiles is not None else ():
        if provider.alias == route.provider and provider.model in ("", route.model):
            return provider.cache_lifetime
    return profile_pb2.CACHE_LIFETIME_UNSPECIFIED


def _cmd_estimate(args: argparse.Namespace) -> int:
    history = _load_input(args).history
    with _connect(args) as client:
        response = client.estimate_tokens(svc.EstimateTokensRequest(history=history))
    _print_message(args, response, _render.estimate(history, response))
    return 0


def _cmd_resolve(args: argparse.Namespace) -> int:
    if args.file and args.profiles:
        raise UsageError("give profiles either as FILE or with --profiles")
    profiles = _load_profiles(args, args.file or args.profiles)
    request = svc.ResolveBudgetRequest(profiles=profiles)
    _set_runtime_flags(args, request)
    with _connect(args) as client:
        response = client.resolve_budget(request)
    _print_message(args, response, _render.resolution(response.resolution))
    return 0


def _trim_request(args: argparse.Namespace, loaded: Loaded) -> svc.TrimHistoryRequest:
    request = svc.TrimHistoryRequest()
    _request_from(args, loaded, request)
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
    _set_runtime_flags(args, request)
    _set_caller(args, request.caller)
    return request


def _cmd_trim(args: argparse.Namespace) -> int:
    loaded = _load_input(args)
    request = _trim_request(args, loaded)
    with _connect(args) as client:
        response = client.trim_history(request)
    if args.emit:
        _emit(args, response.history, loaded)
    else:
        _print_message(args, response, _render.trim(response))
    return 0


def _preflight_request(
    args: argparse.Namespace,
    loaded: Loaded,
    request: svc.PrepareModelCallRequest | svc.CheckCapacityRequest | svc.PlanCompactionRequest,
) -> None:
    """The request file, the profiles flags and the pre-flight inputs, for prepare and check."""
    _request_from(args, loaded, request)
    profiles = _load_profiles(args, args.profiles)
    if profiles is not None:
        request.profiles.CopyFrom(profiles)
    _set_extras(args, request)


def _cmd_prepare(args: argparse.Namespace) -> int:
    loaded = _load_input(args)
    request = svc.PrepareModelCallRequest()
    _preflight_request(args, loaded, request)
    _set_runtime_flags(args, request)
    _set_caller(args, request.caller)
    if args.overflow_recovery:
        request.overflow_recovery = True
    with _connect(args) as client:
        response = client.prepare_model_call(request)
    if args.emit:
        profiles = request.profiles if request.HasField("profiles") else None
        _emit(args, response.history, loaded, response, profiles)
    else:
        _print_message(args, response, _render.prepare(response))
    return 0


def _compaction_request(args: argparse.Namespace, loaded: Loaded) -> svc.PlanCompactionRequest:
    request = svc.PlanCompactionRequest()
    _preflight_request(args, loaded, request)
    _set_runtime_flags(args, request)
    _set_caller(args, request.caller)
    if args.summarizer_model and not args.summarizer_provider:
        raise UsageError("--summarizer-model needs --summarizer-provider")
    if args.summarizer_provider:
        switch = request.summarizer_selection.session_switch
        switch.provider = args.summarizer_provider
        switch.model = args.summarizer_model or ""
    for flag, value in (
        ("--summary-output-tokens", args.summary_output_tokens),
        ("--min-saved-tokens", args.min_saved_tokens),
    ):
        if value is not None and value < 0:
            raise UsageError(f"{flag} must not be negative")
    if args.summary_output_tokens is not None:
        request.summary_output_tokens = args.summary_output_tokens
    if args.min_saved_tokens is not None:
        request.min_saved_tokens = args.min_saved_tokens
    if args.instruction is not None:
        request.instruction = args.instruction
    return request


def _cmd_compact(args: argparse.Namespace) -> int:
    loaded = _load_input(args)
    request = _compaction_request(args, loaded)
    with _connect(args) as client:
        response = client.plan_compaction(request)
    has_plan = response.HasField("plan")
    if args.emit and has_plan:
        _emit(args, response.plan.summary_request, loaded)
    elif args.emit:
        print(_render.compaction(response), file=sys.stderr)
    else:
        _print_message(args, response, _render.compaction(response))
    return 0 if has_plan else EXIT_DOES_NOT_FIT


def _cmd_check(args: argparse.Namespace) -> int:
    loaded = _load_input(args)
    request = svc.CheckCapacityRequest()
    _preflight_request(args, loaded, request)
    with _connect(args) as client:
        try:
            response = client.check_capacity(request)
        except TurnkeeperError as error:
            # The server answers "does not fit" with FAILED_PRECONDITION and the report.
            if error.capacity_report is None:
                raise
            response = svc.CheckCapacityResponse(report=error.capacity_report)
    _print_message(args, response, _render.check(response))
    return 0 if response.report.fits else EXIT_DOES_NOT_FIT


def _cmd_sweep(args: argparse.Namespace) -> int:
    loaded = _load_input(args)
    with _connect(args) as client:
        response = client.sweep_orphans(svc.SweepOrphansRequest(history=loaded.history))
    if args.emit:
        _emit(args, response.history, loaded)
    else:
        _print_message(args, response, _render.sweep(response))
    return 0


def _cmd_cap(args: argparse.Namespace) -> int:
    if args.results.count("-") > 1:
        raise UsageError("stdin (-) can hold one tool result only")
    request = svc.CapToolResultsRequest(contents=[_read_text(path) for path in args.results])
    profiles = _load_profiles(args, args.profiles)
    if args.max_chars is not None:
        if profiles is not None:
            raise UsageError("give the limit either with --max-chars or with --profiles")
        if args.max_chars < 1:
            raise UsageError("--max-chars must be at least 1")
        request.max_tool_result_chars = args.max_chars
    elif profiles is not None:
        request.profiles.CopyFrom(profiles)
    with _connect(args) as client:
        response = client.cap_tool_results(request)
    _print_message(args, response, _render.cap(args.results, response))
    return 0


def _cmd_classify(args: argparse.Namespace) -> int:
    message = _read_text("-") if args.message == "-" else args.message
    request = svc.ClassifyProviderErrorRequest(message=message, provider=args.provider)
    if args.http_status is not None:
        request.http_status = args.http_status
    with _connect(args) as client:
        response = client.classify_provider_error(request)
    _print_message(args, response, _render.classification(response))
    return 0


@contextmanager
def _sigterm_as_exception() -> Iterator[None]:
    """SIGTERM raises TerminatedError in the main thread, so cleanup runs as on Ctrl-C."""

    def terminate(signum: int, frame: object) -> None:
        raise TerminatedError

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _cmd_watch(args: argparse.Namespace) -> int:
    def disconnected(error: TurnkeeperError | None, delay: float) -> None:
        why = str(error) if error is not None else "stream ended"
        print(f"turnkeeper watch: {why}; reconnecting in {delay:.1f}s", file=sys.stderr)

    events = 0
    with _sigterm_as_exception(), _connect(args) as client:
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
    "prepare": _cmd_prepare,
    "check": _cmd_check,
    "compact": _cmd_compact,
    "sweep": _cmd_sweep,
    "cap": _cmd_cap,
    "classify": _cmd_classify,
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
        return EXIT_INTERRUPTED
    except TerminatedError:
        return EXIT_TERMINATED
    except BrokenPipeError:
        # `turnkeeper watch | head`: the reader went away; nothing left to say.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
