"""The request-item limit: how many elements a request's repeated fields hold, counted on the wire
before anything is parsed, so a small request of many tiny items is refused before it expands.

Parsing costs far more per item than the item's bytes (an empty string or sub-message is two bytes
on the wire, and a message object, a list slot and a Python object once parsed), so the request
size alone does not bound a request's memory; its item count does. Every element of every repeated
field at any depth counts (history rows, tool calls, attachments, tool results, contents, hook
texts, providers, classifier routes, passthrough entries and values, ...), as do the elements of
packed scalars. Only the framing is read: tags, varints, lengths. A request whose framing breaks
before the limit is passed is left to the decoder, which names the broken field.

Both engines count by the same rules, from the same `ItemSchema` (built here from the request
descriptors), so they refuse the same requests with the same error: `check_items` counts before
parsing, with the Rust counter (`turnkeeper._native.item_limit_crossing`) when the extension is
built, else with `crossing_field` below; the native engine's history RPCs count inside the scan
that reads the history instead (`engine/native.py`), which names the same field.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from turnkeeper.server.contract.errors import FieldViolation, RequestError, invalid_argument
from turnkeeper.v1 import errors_pb2
from turnkeeper.v1 import history_service_pb2 as svc

if TYPE_CHECKING:
    from turnkeeper import _native

LIMIT_NAME = "max_request_items"
DEFAULT_MAX_REQUEST_ITEMS = 100_000
"""As many as the default history rows, so a history at the row limit passes on its rows alone;
low enough that the parsed objects of a request of empty items stay within the memory its size
allows (docs/request-limits.md)."""
BYTES_PER_EXTRA_ITEM = 32
"""A request may hold one item more for every this many of its bytes: items that carry data cost
memory in proportion to their bytes, which admission already bounds."""

VARINT, FIXED64, LEN, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_DEPTH = 100
"""upb's nesting limit: nothing deeper decodes, so the counter does not descend further."""

# Packed element widths: a varint element ends at each byte below 0x80.
PACKED_VARINT = 1
PACKED_FIXED32 = 4
PACKED_FIXED64 = 8

_SCALAR_WIRE = {
    FieldDescriptor.TYPE_DOUBLE: FIXED64,
    FieldDescriptor.TYPE_FIXED64: FIXED64,
    FieldDescriptor.TYPE_SFIXED64: FIXED64,
    FieldDescriptor.TYPE_FLOAT: FIXED32,
    FieldDescriptor.TYPE_FIXED32: FIXED32,
    FieldDescriptor.TYPE_SFIXED32: FIXED32,
}
_PACKED_WIDTH = {FIXED64: PACKED_FIXED64, FIXED32: PACKED_FIXED32, VARINT: PACKED_VARINT}


class FieldRule(NamedTuple):
    """How one field's occurrences count: `wire_type` is the type it is declared with (LEN for
    strings, bytes and messages); `repeated` counts each occurrence as an item, `packed` (the
    element width, 0 when it cannot be packed) counts a LEN occurrence's elements; `child` is the
    index of the message type to descend into, -1 when it holds no repeated field."""

    number: int
    wire_type: int
    repeated: bool
    packed: int
    child: int


@dataclass(frozen=True, slots=True)
class ItemSchema:
    """The fields that hold or lead to repeated fields, for every message type a request reaches;
    `roots` gives each request type's index."""

    types: tuple[dict[int, FieldRule], ...]
    roots: dict[str, int]
    field_names: tuple[dict[int, str], ...]


def _build_schema(requests: Iterable[Descriptor]) -> ItemSchema:
    index: dict[str, int] = {}
    order: list[Descriptor] = []

    def visit(descriptor: Descriptor) -> None:
        if descriptor.full_name in index:
            return
        index[descriptor.full_name] = len(order)
        order.append(descriptor)
        for field in descriptor.fields:
            if field.message_type is not None:
                visit(field.message_type)

    request_list = list(requests)
    for descriptor in request_list:
        visit(descriptor)
    # A type is kept when it holds a repeated field, directly or below (a fixed point: types
    # can be recursive, like Struct and Value).
    holds: set[str] = set()
    changed = True
    while changed:
        changed = False
        for descriptor in order:
            if descriptor.full_name in holds:
                continue
            if any(
                _is_repeated(f)
                or (f.message_type is not None and f.message_type.full_name in holds)
                for f in descriptor.fields
            ):
                holds.add(descriptor.full_name)
                changed = True
    types: list[dict[int, FieldRule]] = []
    for descriptor in order:
        rules: dict[int, FieldRule] = {}
        for field in descriptor.fields:
            child_type = field.message_type
            child = (
                index[child_type.full_name]
                if child_type is not None and child_type.full_name in holds
                else -1
            )
            repeated = _is_repeated(field)
            if not repeated and child < 0:
                continue
            if child_type is not None or field.type in (
                FieldDescriptor.TYPE_STRING,
                FieldDescriptor.TYPE_BYTES,
            ):
                rules[field.number] = FieldRule(field.number, LEN, repeated, 0, child)
            else:
                wire = _SCALAR_WIRE.get(field.type, VARINT)
                rules[field.number] = FieldRule(
                    field.number, wire, repeated, _PACKED_WIDTH[wire], -1
                )
        types.append(rules)
    names = tuple({f.number: f.name for f in d.fields} for d in order)
    return ItemSchema(tuple(types), {d.full_name: index[d.full_name] for d in request_list}, names)


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


REQUEST_TYPES: tuple[type[Message], ...] = (
    svc.EstimateTokensRequest,
    svc.ResolveBudgetRequest,
    svc.TrimHistoryRequest,
    svc.PrepareModelCallRequest,
    svc.PlanCompactionRequest,
    svc.CheckCapacityRequest,
    svc.SweepOrphansRequest,
    svc.CapToolResultsRequest,
    svc.ClassifyProviderErrorRequest,
    svc.TrimEventsRequest,
)


@functools.cache
def item_schema() -> ItemSchema:
    """The schema of every HistoryService request type (built once)."""
    descriptors: list[Descriptor] = [t.DESCRIPTOR for t in REQUEST_TYPES]  # type: ignore[misc]
    return _build_schema(descriptors)


class _BrokenFramingError(Exception):
    """The framing breaks: the decoder, not the counter, answers for these bytes."""


class _OverLimitError(Exception):
    """The count passed the limit."""


def _varint(buf: bytes, pos: int, end: int, max_bytes: int = 10) -> tuple[int, int]:
    """A varint of at most `max_bytes` bytes (10 for values, 5 for tags and lengths, as upb)."""
    result = shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise _BrokenFramingError
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise _BrokenFramingError


def _tag(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A tag as upb reads it: at most five bytes, within 32 bits, field number not 0."""
    tag, pos = _varint(buf, pos, end, 5)
    if tag > 0xFFFFFFFF or tag >> 3 == 0:
        raise _BrokenFramingError
    return tag, pos


class _Counter:
    __slots__ = ("buf", "left", "types")

    def __init__(self, buf: bytes, types: tuple[dict[int, FieldRule], ...], limit: int) -> None:
        self.buf = buf
        self.types = types
        self.left = limit

    def walk(self, pos: int, end: int, rules: dict[int, FieldRule], depth: int) -> None:
        """Counts the items of one message body; raises _OverLimitError past the limit."""
        buf = self.buf
        while pos < end:
            byte = buf[pos]
            if 0x08 <= byte < 0x80:
                tag, pos = byte, pos + 1
            else:
                tag, pos = _tag(buf, pos, end)
            wire, number = tag & 7, tag >> 3
            if wire == LEN:
                byte = buf[pos] if pos < end else 0x80
                if byte < 0x80:
                    length, pos = byte, pos + 1
                else:
                    length, pos = _varint(buf, pos, end, 5)
                stop = pos + length
                if stop > end:
                    raise _BrokenFramingError
                rule = rules.get(number)
                if rule is not None:
                    if rule.wire_type == LEN:
                        if rule.repeated:
                            self.take(1)
                        if rule.child >= 0 and depth < MAX_DEPTH:
                            self.walk(pos, stop, self.types[rule.child], depth + 1)
                    elif rule.packed:
                        self.take(_packed_elements(buf, pos, stop, rule.packed))
                pos = stop
            elif wire == VARINT:
                _, pos = _varint(buf, pos, end)
                self._scalar(rules, number, VARINT)
            elif wire in (FIXED64, FIXED32):
                pos += 8 if wire == FIXED64 else 4
                if pos > end:
                    raise _BrokenFramingError
                self._scalar(rules, number, wire)
            elif wire == START_GROUP:
                pos = _skip_group(self.buf, pos, end, number, depth + 1)
            else:
                raise _BrokenFramingError  # END_GROUP outside a group, or wire types 6 and 7

    def _scalar(self, rules: dict[int, FieldRule], number: int, wire: int) -> None:
        rule = rules.get(number)
        if rule is not None and rule.repeated and rule.wire_type == wire:
            self.take(1)

    def take(self, items: int) -> None:
        self.left -= items
        if self.left < 0:
            raise _OverLimitError


def _packed_elements(buf: bytes, start: int, stop: int, width: int) -> int:
    if width == PACKED_VARINT:
        payload = buf[start:stop]
        return len(payload) - sum(1 for byte in payload if byte >= 0x80)
    return (stop - start) // width


def crossing_field(raw: bytes, request_type: type[Message], limit: int) -> int | None:
    """The number of the top-level field whose items take the request past `limit` items, or
    None when it holds at most `limit` (or its framing breaks first)."""
    schema = item_schema()
    root = schema.types[schema.roots[request_type.DESCRIPTOR.full_name]]
    counter = _Counter(raw, schema.types, limit)
    end = len(raw)
    pos = 0
    try:
        # The top level one field at a time, so the crossing is named by its field.
        while pos < end:
            start = pos
            pos = _next_top_field(raw, pos, end)
            counter.walk(start, pos, root, 0)
    except _OverLimitError:
        tag, _ = _tag(raw, start, end)
        return tag >> 3
    except (_BrokenFramingError, IndexError):
        return None
    return None


def _next_top_field(buf: bytes, pos: int, end: int) -> int:
    """Where the top-level field at `pos` ends."""
    tag, pos = _tag(buf, pos, end)
    return _skip_value(buf, pos, end, tag, 1)


def _skip_value(buf: bytes, pos: int, end: int, tag: int, depth: int) -> int:
    """Where the value of the field whose tag is `tag`, starting at `pos`, ends."""
    wire = tag & 7
    if wire == VARINT:
        _, pos = _varint(buf, pos, end)
    elif wire == FIXED64:
        pos += 8
    elif wire == FIXED32:
        pos += 4
    elif wire == LEN:
        length, pos = _varint(buf, pos, end, 5)
        pos += length
    elif wire == START_GROUP:
        return _skip_group(buf, pos, end, tag >> 3, depth)
    else:
        raise _BrokenFramingError
    if pos > end:
        raise _BrokenFramingError
    return pos


def _skip_group(buf: bytes, pos: int, end: int, number: int, depth: int) -> int:
    """Skips an (unknown) group body and its end tag; its fields are not items."""
    if depth > MAX_DEPTH:
        raise _BrokenFramingError
    while pos < end:
        tag, pos = _tag(buf, pos, end)
        if tag & 7 == END_GROUP:
            if tag >> 3 != number:
                raise _BrokenFramingError
            return pos
        pos = _skip_value(buf, pos, end, tag, depth + 1)
    raise _BrokenFramingError


def items_allowed(request_bytes: int, max_items: int) -> int:
    """The items a request of `request_bytes` may hold: `max_items` plus one per
    BYTES_PER_EXTRA_ITEM of its bytes."""
    return max_items + request_bytes // BYTES_PER_EXTRA_ITEM


def too_many_items(
    request_type: type[Message], number: int, limit: int, max_items: int
) -> RequestError:
    """INVALID_ARGUMENT, reason REQUEST_TOO_LARGE, naming the top-level field where the count
    passed `limit` (this request's allowance), with the limit in ErrorInfo metadata (`limit`,
    `max_request_items`, `items_allowed`)."""
    fields = request_type.DESCRIPTOR.fields_by_number
    name = fields[number].name if number in fields else str(number)
    violation = FieldViolation(
        field=name,
        description=(
            f"The request holds more than {limit} items in its repeated fields (history rows, "
            "tool calls, attachments, tool results, strings, profiles and the like, counted "
            f"together); this server accepts at most {limit} in a request of this size "
            f"(max_request_items {max_items} plus one per {BYTES_PER_EXTRA_ITEM} bytes), and "
            "the limit was passed in this field."
        ),
    )
    error = invalid_argument(errors_pb2.ERROR_REASON_REQUEST_TOO_LARGE, [violation])
    error.metadata.update(
        {"limit": LIMIT_NAME, LIMIT_NAME: str(max_items), "items_allowed": str(limit)}
    )
    return error


def _python_crossing(raw: bytes, request_type: type[Message], limit: int) -> int | None:
    return crossing_field(raw, request_type, limit)


@functools.cache
def _counter() -> Callable[[bytes, type[Message], int], int | None]:
    return _native_counter() or _python_crossing


@functools.cache
def native_item_schema() -> _native.ItemSchema:
    """`item_schema()` handed to the extension (built once); ImportError without it."""
    from turnkeeper import _native

    return _native.ItemSchema(
        [
            [(r.number, r.wire_type, r.repeated, r.packed, r.child) for r in rules.values()]
            for rules in item_schema().types
        ]
    )


def _native_counter() -> Callable[[bytes, type[Message], int], int | None] | None:
    """The Rust counter (the same rules, at a small fraction of the time) when the extension is
    built; the Python engine runs without it too."""
    try:
        from turnkeeper import _native

        native_schema = native_item_schema()
    except ImportError:
        return None
    roots = item_schema().roots

    def crossing(raw: bytes, request_type: type[Message], limit: int) -> int | None:
        root = roots[request_type.DESCRIPTOR.full_name]
        return _native.item_limit_crossing(raw, native_schema, root, limit)

    return crossing


def allowance_to_count(request_bytes: int, max_items: int) -> int | None:
    """The allowance of a request of `request_bytes` (`items_allowed`) when its items must be
    counted; None when it has no more bytes than that: every item takes at least one byte on the
    wire (a packed element), so it cannot hold too many."""
    limit = items_allowed(request_bytes, max_items)
    return None if request_bytes <= limit else limit


def check_items(raw: bytes, request_type: type[Message], max_items: int) -> None:
    """Raises `too_many_items` when the request holds more items than it may (`items_allowed`);
    a request too small to hold too many is not counted (`allowance_to_count`)."""
    limit = allowance_to_count(len(raw), max_items)
    if limit is None:
        return
    number = _counter()(raw, request_type, limit)
    if number is not None:
        raise too_many_items(request_type, number, limit, max_items)
