"""The history engine: pure functions over a compact row view (no gRPC here).

Modules follow the spec: `pricing` and `rows` (§4, §9 estimates), `trimming` (§2, §5, §6 whole-turn
retention), `budget` (§3 resolution), `preflight` (§3 capacity), `sweep` (§8 orphans), `toolcap`
(§8 tool-result cap), and `working` (a history kept in step with its pricing).
"""
