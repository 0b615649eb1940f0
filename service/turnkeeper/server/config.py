"""Server configuration: one typed model; flags > TURNKEEPER_* environment > TOML file > defaults.

Every field of `ServerConfig` is at once a flag (`--field-name`), an environment variable
(`TURNKEEPER_FIELD_NAME`) and a key of the `--config` TOML file (`field_name`): adding an option
is adding one annotated field with a description. pydantic-settings reads each layer; this module
only orders them and turns a validation error into one line that names where the bad value came
from.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import tomli_w
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from turnkeeper.server.contract.limits import DEFAULT_MAX_REQUEST_ITEMS
from turnkeeper.server.version import server_version

MIB = 1024 * 1024
CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_INFLIGHT_BYTES = 256 * MIB
_NO_LIMIT = 2**62  # cgroup v1 writes a number near 2**63 for "no limit", v2 writes "max"


def _limit_in(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < _NO_LIMIT else None


def cgroup_memory_limit(
    root: Path = CGROUP_ROOT, membership: Path = Path("/proc/self/cgroup")
) -> int | None:
    """The memory limit this process runs under, in bytes, or None when it has none: the smallest
    `memory.max` (cgroup v2) or `memory.limit_in_bytes` (v1, `root`/memory) of its own cgroup and
    of every cgroup above it. Its cgroup is read from `membership`; where that directory is not
    mounted (a container without a cgroup namespace sees its own cgroup at the root), the root's
    file is the container's."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        lines = []
    found: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            mount, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            mount, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        here = mount / path.lstrip("/")
        directory = here if here.is_dir() else mount
        for level in (directory, *directory.parents):
            limit = _limit_in(level / name)
            if limit is not None:
                found.append(limit)
            if level == mount:
                break
    return min(found, default=None)


def default_inflight_budget(limit: int | None = None) -> int:
    """A quarter of the cgroup memory limit (a parsed request takes up to three times its bytes,
    and the process and the requests still arriving need the rest), at least 16 MiB; 256 MiB
    without a limit."""
    limit = cgroup_memory_limit() if limit is None else limit
    if limit is None:
        return DEFAULT_INFLIGHT_BYTES
    return max(16 * MIB, limit // 4)


ENV_PREFIX = "TURNKEEPER_"
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
PROG = "turnkeeper-server"
# gRPC channel args are C ints.
_MAX_MESSAGE_BYTES = 2**31 - 1
# sun_path is 108 bytes on Linux (104 on macOS), including the terminating NUL.
_MAX_UNIX_PATH_BYTES = 103


def _tcp_address(raw: str) -> str:
    address = raw.strip()
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{raw!r} is not host:port (IPv6 as [::1]:port)")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ValueError(f"{raw!r}: write an IPv6 host in brackets, as [::1]:port")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{raw!r}: port must be 0..65535 (0 picks a free port)")
    return address


def _unix_path(raw: str) -> str:
    path = raw.strip()
    if path.startswith("unix:"):
        raise ValueError(f"{raw!r}: give a filesystem path, without 'unix:'")
    if not path:
        raise ValueError("a Unix socket path must not be empty")
    if len(os.fsencode(os.path.abspath(path))) > _MAX_UNIX_PATH_BYTES:
        raise ValueError(
            f"{raw!r} is too long for a Unix socket (max {_MAX_UNIX_PATH_BYTES} bytes)"
        )
    return os.path.abspath(path)


def _absolute_path(raw: str) -> str:
    return os.path.abspath(raw.strip())


def _comma_list(raw: object) -> object:
    """The environment gives lists comma-separated; flags and TOML give real lists."""
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def _phrase_list(raw: object) -> object:
    """Comma-separated, as every list option (the flag parser joins repeated flags with commas).

    An empty part is kept, so that the phrase validator refuses it instead of it vanishing.
    """
    if isinstance(raw, str):
        return tuple(raw.split(",")) if raw.strip() else ()
    return raw


def _phrase(raw: str) -> str:
    phrase = raw.strip().lower()
    if not phrase:
        raise ValueError("an overflow phrase must not be empty (it would match every error)")
    return phrase


def _provider_phrase(raw: str) -> str:
    alias, sep, phrase = raw.partition("=")
    if not sep or not alias.strip():
        raise ValueError(f"{raw!r} is not ALIAS=PHRASE")
    return f"{alias.strip()}={_phrase(phrase)}"


def _lower(raw: object) -> object:
    return raw.strip().lower() if isinstance(raw, str) else raw


def _upper(raw: object) -> object:
    return raw.strip().upper() if isinstance(raw, str) else raw


def _events(raw: str) -> str:
    url = raw.strip()
    if url != "memory" and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(
            f"{raw!r}: use 'memory' (in-process ring buffer), redis://host:port or unix:///redis.sock"
        )
    return url


def _octal(raw: str) -> str:
    """A file mode in octal: 660, 0660 or 0o660."""
    text = raw.strip().lower().removeprefix("0o")
    if not text or any(c not in "01234567" for c in text) or int(text, 8) > 0o777:
        raise ValueError(f"{raw!r} is not an octal file mode such as 660")
    return text


def _distinct(values: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(values)) != len(values):
        raise ValueError("the same address is given twice")
    return values


TcpAddress = Annotated[str, AfterValidator(_tcp_address)]
UnixPath = Annotated[str, AfterValidator(_unix_path)]
AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
# NoDecode: an environment value is split on commas instead of being parsed as JSON.
AddressList = Annotated[tuple[TcpAddress, ...], NoDecode, BeforeValidator(_comma_list)]
UnixPathList = Annotated[tuple[UnixPath, ...], NoDecode, BeforeValidator(_comma_list)]
PhraseList = Annotated[
    tuple[Annotated[str, AfterValidator(_phrase)], ...], NoDecode, BeforeValidator(_phrase_list)
]
ProviderPhraseList = Annotated[
    tuple[Annotated[str, AfterValidator(_provider_phrase)], ...],
    NoDecode,
    BeforeValidator(_phrase_list),
]
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)
]


def is_loopback(address: str) -> bool:
    """Whether HOST:PORT binds only this machine's loopback interface."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: assume it resolves beyond this machine
        return False


class ServerConfig(BaseSettings):
    """Everything the sidecar needs to start; immutable once parsed.

    Constructing it directly (as tests do) reads no environment and no file: `parse_config`
    is the one place that layers the sources.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="forbid",
        cli_kebab_case=True,
        cli_implicit_flags=True,
    )

    listen: AddressList = Field(
        default=("127.0.0.1:50051",),
        json_schema_extra={"metavar": "HOST:PORT"},
        description="TCP address to serve on, repeatable; port 0 picks a free port "
        "(environment: comma-separated)",
    )
    unix: UnixPathList = Field(
        default=(),
        json_schema_extra={"metavar": "PATH"},
        description="Unix socket path to serve on, repeatable (environment: comma-separated)",
    )
    max_receive_bytes: int = Field(
        default=64 * MIB,
        ge=1024,
        le=_MAX_MESSAGE_BYTES,
        description="largest request (and response) in bytes",
    )
    max_history_rows: int = Field(
        default=100_000, ge=1, le=2**32 - 1, description="most history rows accepted per request"
    )
    max_request_items: int = Field(
        default=DEFAULT_MAX_REQUEST_ITEMS,
        ge=1,
        le=2**63 - 1,
        description="most items (elements of repeated fields, at any depth, together) per request",
    )
    events: Annotated[str, AfterValidator(_events)] = Field(
        default="memory",
        json_schema_extra={"metavar": "memory|URL"},
        description="TrimEvents backend: 'memory' (in-process ring buffer) or redis://host:port",
    )
    ring_size: int = Field(
        default=10_000, ge=1, le=10_000_000, description="events kept for resume"
    )
    subscriber_queue: int = Field(
        default=1_000,
        ge=1,
        le=10_000_000,
        description="redis backend: stream entries a subscriber reads at once",
    )
    grace_seconds: float = Field(
        default=10.0,
        ge=0,
        allow_inf_nan=False,
        description="how long in-flight RPCs may drain on shutdown",
    )
    ready_file: AbsolutePath | None = Field(
        default=None,
        json_schema_extra={"metavar": "PATH"},
        description="write {tcp, unix, http, pid} JSON here once serving",
    )
    http: TcpAddress | None = Field(
        default=None,
        json_schema_extra={"metavar": "HOST:PORT"},
        description="serve the ops HTTP port here: /metrics (Prometheus), /healthz, /readyz; "
        "off by default",
    )
    log_level: LogLevel = Field(
        default="INFO", description="DEBUG, INFO, WARNING, ERROR or CRITICAL"
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="text lines, or one JSON object per line"
    )
    tracing: Literal["none", "otlp", "console"] = Field(
        default="none",
        description="OpenTelemetry spans per RPC: otlp (OTEL_EXPORTER_OTLP_* variables; needs "
        "the otlp extra) or console",
    )
    # Admission control and connection limits: README "Limits" gives each one's status.
    max_inflight_request_bytes: int = Field(
        default_factory=lambda: default_inflight_budget(),
        ge=1024,
        description="request bytes all admitted calls may hold together; a call that would pass "
        "it gets RESOURCE_EXHAUSTED (OVERLOADED, RetryInfo) (default: a quarter of the cgroup "
        "memory limit when there is one, else 256 MiB)",
    )
    heavy_call_bytes: int = Field(
        default=1 * MIB, ge=1, description="a request at least this big is a heavy call"
    )
    max_receiving_calls: int = Field(
        default=8,
        ge=1,
        description="unary calls whose request is still arriving, at once; one more waits "
        "receive-wait-seconds, then is refused before its bytes are read: RESOURCE_EXHAUSTED "
        "(OVERLOADED, RetryInfo)",
    )
    receive_wait_seconds: float = Field(
        default=5.0,
        ge=0,
        allow_inf_nan=False,
        description="how long a call over max-receiving-calls waits for a slot before it is "
        "refused",
    )
    max_heavy_calls: int = Field(
        default=2,
        ge=1,
        description="heavy calls running at once; one more waits in a FIFO queue for a slot, up "
        "to its deadline or heavy-wait-seconds, then gets RESOURCE_EXHAUSTED (OVERLOADED, "
        "RetryInfo)",
    )
    heavy_wait_seconds: float = Field(
        default=5.0,
        ge=0,
        allow_inf_nan=False,
        description="how long a heavy call over max-heavy-calls waits for a slot before it is "
        "refused",
    )
    shed_queue_ms: float = Field(
        default=50.0,
        ge=0,
        allow_inf_nan=False,
        description="once for shed-interval-ms every unary call has waited over this long for "
        "the server to take it with shed-queue-calls more waiting behind it (a standing queue), "
        "such calls are refused at once: RESOURCE_EXHAUSTED (OVERLOADED, limit queue_delay, "
        "RetryInfo); 0: never",
    )
    shed_queue_calls: int = Field(
        default=60,
        ge=0,
        description="a call is refused (see shed-queue-ms) only with more than this many calls "
        "waiting behind it: so many clients at once (the default: 48 mixed + 12 heavy) never see "
        "a refusal, however slow the server",
    )
    shed_interval_ms: float = Field(
        default=100.0,
        gt=0,
        allow_inf_nan=False,
        description="how long the queue must stand (see shed-queue-ms) before any call is refused",
    )
    accept_ahead: int = Field(
        default=8,
        ge=0,
        le=256,
        description="requests for calls the server keeps outstanding per per-call method beyond "
        "grpc's one, so that calls wait in the server's own queue, served by their cost, rather "
        "than in grpc core by their method's share of the traffic (0: grpc's one only)",
    )
    max_concurrent_streams: int = Field(
        default=100, ge=1, description="concurrent calls per connection (HTTP/2 setting)"
    )
    max_connections: int = Field(
        default=256,
        ge=0,
        description="open client connections; further ones are closed at once (0: no limit)",
    )
    max_connections_per_peer: int = Field(
        default=128,
        ge=0,
        description="unused connections (no call yet) one peer address (an IPv6 /64) may hold; "
        "beyond it the most idle are closed (0: no limit)",
    )
    max_connection_idle_seconds: float = Field(
        default=300.0,
        ge=0,
        allow_inf_nan=False,
        description="close a connection with no call for this long (0: never)",
    )
    max_connection_age_seconds: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="ask clients to reconnect after this long, calls then get grace-seconds "
        "to finish (0: never)",
    )
    min_client_ping_seconds: float = Field(
        default=10.0,
        ge=0,
        allow_inf_nan=False,
        description="keepalive pings closer than this are strikes; two end the connection",
    )
    keepalive_seconds: float = Field(
        default=60.0,
        gt=0,
        allow_inf_nan=False,
        description="ping a connection after this long without traffic from the peer",
    )
    keepalive_timeout_seconds: float = Field(
        default=20.0,
        gt=0,
        allow_inf_nan=False,
        description="close a connection whose peer has not answered a ping by then (a client "
        "that vanished or stopped reading)",
    )
    handshake_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        description="close a connection that has not completed the HTTP/2 handshake by then",
    )
    engine: Annotated[Literal["python", "native"], BeforeValidator(_lower)] | None = Field(
        default=None,
        json_schema_extra={"metavar": "python|native"},
        description="history engine: 'native' (Rust, over the request bytes) or 'python' (the "
        "reference); unset picks native when it is built, else python",
    )
    engine_workers: int = Field(
        default=max(2, os.cpu_count() or 1),
        ge=1,
        le=1024,
        description="threads running engine work off the event loop (default: the CPUs, at "
        "least 2)",
    )
    unix_mode: Annotated[str, AfterValidator(_octal)] = Field(
        default="660",
        json_schema_extra={"metavar": "OCTAL"},
        description="permissions of the Unix sockets, in octal",
    )
    tls_cert: AbsolutePath | None = Field(
        default=None,
        json_schema_extra={"metavar": "PATH"},
        description="PEM certificate (chain) for TLS on the TCP listeners; re-read when it changes",
    )
    tls_key: AbsolutePath | None = Field(
        default=None,
        json_schema_extra={"metavar": "PATH"},
        description="PEM private key of --tls-cert",
    )
    tls_client_ca: AbsolutePath | None = Field(
        default=None,
        json_schema_extra={"metavar": "PATH"},
        description="PEM CA bundle: require client certificates it signed (mTLS)",
    )
    auth_tokens: AbsolutePath | None = Field(
        default=None,
        json_schema_extra={"metavar": "PATH"},
        description="TOML token file: require a bearer token on every call but health; each "
        "token acts as one runtime_id",
    )
    reflection: bool = Field(default=True, description="serve gRPC server reflection")
    http_tls_cert: AbsolutePath | None = Field(
        default=None,
        json_schema_extra={"metavar": "PATH"},
        description="PEM certificate (chain) for HTTPS on the ops port (default: --tls-cert, so "
        "the ops port has TLS whenever gRPC has it); re-read when it changes",
    )
    http_tls_key: AbsolutePath | None = Field(
        default=None,
        json_schema_extra={"metavar": "PATH"},
        description="PEM private key of --http-tls-cert (default: --tls-key)",
    )
    http_plaintext: bool = Field(
        default=False,
        description="serve the ops port as plain HTTP even when gRPC has TLS (dashboard sign-in "
        "is then refused beyond loopback)",
    )
    metrics_auth: bool = Field(
        default=False,
        description="/metrics needs a bearer token of --auth-tokens (probes stay open)",
    )
    overflow_phrase: PhraseList = Field(
        default=(),
        json_schema_extra={"metavar": "PHRASE"},
        description="extra phrase that marks a provider error as a context-window overflow "
        "(ClassifyProviderError, spec §10.4), matched lower-cased; repeatable, no commas "
        "(environment: comma-separated)",
    )
    provider_overflow_phrase: ProviderPhraseList = Field(
        default=(),
        json_schema_extra={"metavar": "ALIAS=PHRASE"},
        description="extra overflow phrase for one provider alias only; repeatable, no commas "
        "(environment: comma-separated)",
    )

    @model_validator(mode="after")
    def _tls_files_go_together(self) -> ServerConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        if (self.http_tls_cert is None) != (self.http_tls_key is None):
            raise ValueError("--http-tls-cert and --http-tls-key go together")
        if self.http_plaintext and self.http_tls_cert is not None:
            raise ValueError("--http-plaintext and --http-tls-cert exclude each other")
        if self.metrics_auth and self.auth_tokens is None:
            raise ValueError("--metrics-auth needs --auth-tokens")
        return self

    @property
    def http_tls(self) -> tuple[str, str] | None:
        """The certificate and key of the ops port's TLS: its own pair, else the gRPC one."""
        if self.http_plaintext:
            return None
        if self.http_tls_cert is not None and self.http_tls_key is not None:
            return self.http_tls_cert, self.http_tls_key
        if self.tls_cert is not None and self.tls_key is not None:
            return self.tls_cert, self.tls_key
        return None

    @field_validator("listen", "unix")
    @classmethod
    def _no_repeats(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(values)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)

    @property
    def provider_overflow_phrases(self) -> dict[str, tuple[str, ...]]:
        """`provider_overflow_phrase` grouped by alias, in configuration order."""
        grouped: dict[str, list[str]] = {}
        for entry in self.provider_overflow_phrase:
            alias, _, phrase = entry.partition("=")
            grouped.setdefault(alias, []).append(phrase)
        return {alias: tuple(phrases) for alias, phrases in grouped.items()}

    @property
    def max_send_bytes(self) -> int:
        return self.max_receive_bytes

    @property
    def unix_permissions(self) -> int:
        """`unix_mode` as permission bits."""
        return int(self.unix_mode, 8)

    @property
    def events_url(self) -> str | None:
        """None selects the in-process ring buffer; otherwise the Redis URL."""
        return None if self.events == "memory" else self.events

    def to_toml(self) -> str:
        """The effective configuration as a file `--config` accepts (unset options omitted)."""
        values = {k: v for k, v in self.model_dump(mode="json").items() if v is not None}
        return tomli_w.dumps(values)


class _Environment(EnvSettingsSource):
    """TURNKEEPER_* variables from a given mapping (os.environ unless a test passes one)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(ServerConfig, env_ignore_empty=True)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty)


def version_text() -> str:
    """The version and the engine a server started now would use."""
    # Imported here: the engines import the generated code, which option parsing does not need.
    from turnkeeper.server.engine import default_engine_name

    return f"{PROG} {server_version()} (engine: {default_engine_name()})"


class _ShowVersion(argparse.Action):
    """`--version`: the text is made only when asked for, as it looks for the native engine."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="turnkeeper: LLM conversation-history sidecar (gRPC). Every option is a "
        f"flag, a {ENV_PREFIX}* environment variable (shown with each flag) and a key of the "
        "--config TOML file; flags win over the environment, which wins over the file, which "
        "wins over the defaults.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help=f"TOML file of options, keys as the flags with '_' for '-' (env {CONFIG_ENV})",
    )
    parser.add_argument(
        "--version", action=_ShowVersion, nargs=0, help="show the version and the engine, and exit"
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective configuration as TOML and exit",
    )
    return parser


def _set_metavars(parser: argparse.ArgumentParser) -> None:
    """Field-chosen metavars (HOST:PORT) instead of the type names pydantic-settings derives."""
    for action in parser._actions:
        field = ServerConfig.model_fields.get(action.dest)
        extra = field.json_schema_extra if field is not None else None
        metavar = extra.get("metavar") if isinstance(extra, dict) else None
        if isinstance(metavar, str):
            action.metavar = metavar


def _read_toml(path: str, fail: Callable[[str], NoReturn]) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as file:
            return tomllib.load(file)
    except OSError as error:
        fail(f"config file {path}: {error.strerror}")
    except tomllib.TOMLDecodeError as error:
        fail(f"config file {path}: {error}")


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def parse_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> ServerConfig:
    """Flags win over the environment, which wins over the TOML file, which wins over defaults.

    Bad values end the process like argparse does (usage + one message naming the flag,
    variable or file that gave the value, exit 2), never with a traceback. `--print-config`
    prints the result and exits 0.
    """
    env = os.environ if environ is None else environ
    parser = _parser()
    cli: CliSettingsSource[ServerConfig] = CliSettingsSource(
        ServerConfig,
        root_parser=parser,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_show_env_vars=True,
    )
    _set_metavars(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))

    def fail(message: str) -> NoReturn:
        parser.error(message)

    config_path = args.config or env.get(CONFIG_ENV, "").strip() or None
    layers: list[tuple[str, dict[str, Any]]] = [
        (f"config file {config_path}", _read_toml(config_path, fail) if config_path else {}),
        ("environment", _Environment(env)()),
        ("flags", cli(parsed_args=args)()),
    ]
    merged: dict[str, Any] = {}
    for _, values in layers:
        merged.update(values)
    try:
        config = ServerConfig(**merged)
    except ValidationError as error:
        fail(_describe(error, layers))
    if args.print_config:
        sys.stdout.write(config.to_toml())
        sys.exit(0)
    return config


def _describe(error: ValidationError, layers: list[tuple[str, dict[str, Any]]]) -> str:
    """The first problem, named by where its value came from (the highest layer that set it)."""
    problem = error.errors()[0]
    field = str(problem["loc"][0]) if problem["loc"] else ""
    message = problem["msg"].removeprefix("Value error, ")
    for name, values in reversed(layers):
        if field in values:
            if name == "flags":
                return f"{_flag(field)}: {message} (got {problem['input']!r})"
            if name == "environment":
                return f"environment variable {ENV_PREFIX}{field.upper()}: {message}"
            return f"{name}: {field}: {message}"
    return f"{field}: {message}" if field else message
