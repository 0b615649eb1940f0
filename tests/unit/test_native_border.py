"""The border between the two engines: what the Rust extension and the Python side must agree on.

The native engine reports history rules by name and orphan removals by its own kind; every name
it can report must be one the Python side knows, and every rule the Python side describes must be
one the native engine can find. (The values the engine needs, roles, prefix, prices and cap, are
not copied: `CONVENTIONS` hands Python's own to it.)
"""

from __future__ import annotations

import shutil

import pytest
from turnkeeper.server.contract.history_rules import HISTORY_RULES, HistoryRule
from turnkeeper.server.engine import native_available

if not native_available():
    if shutil.which("cargo") is None:
        pytest.skip("the native engine is not built (no cargo)", allow_module_level=True)
    pytest.fail("the native engine is not built although cargo is here: run `make venv`")

from turnkeeper import _native
from turnkeeper.server.engine.native import ORPHAN_KINDS
from turnkeeper.v1 import trim_pb2


def test_both_engines_name_the_same_history_rules() -> None:
    assert len(set(_native.HISTORY_RULES)) == len(_native.HISTORY_RULES)
    assert set(_native.HISTORY_RULES) == {rule.value for rule in HistoryRule}


def test_every_rule_but_the_row_count_has_a_fixed_description() -> None:
    assert set(HISTORY_RULES) == set(HistoryRule) - {HistoryRule.TOO_MANY_ROWS}


def test_every_native_orphan_kind_maps_to_a_distinct_proto_kind() -> None:
    kinds = {getattr(_native.OrphanKind, name) for name in dir(_native.OrphanKind)}
    native_kinds = {kind for kind in kinds if isinstance(kind, _native.OrphanKind)}
    assert set(ORPHAN_KINDS) == native_kinds
    proto_kinds = set(trim_pb2.OrphanKind.values()) - {trim_pb2.ORPHAN_KIND_UNSPECIFIED}
    assert sorted(ORPHAN_KINDS.values()) == sorted(proto_kinds)
