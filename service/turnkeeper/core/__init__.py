"""The history engine: pure functions over a compact row view (no gRPC here).

Modules follow the spec:

- `pricing`: the pinned estimate of a text and an attachment (§4, §9);
- `rows`: the compact row view, each row's kind and price (§0, §9);
- `trimming`: whole-turn retention, the turn-count, row-count and token-budget cuts (§2, §5, §6,
  §11);
- `budget`: resolving the route, its capacity, budget and turn limit (§3, §11.2);
- `preflight`: the capacity pre-flight and the room for the rest of the request (§3, §12);
- `sweep`: the orphan sweep (§8, §10.2);
- `toolcap`: the tool-result cap (§8, §10.6);
- `working`: a history kept in step with its pricing, the breadcrumb's cost (§7, §9);
- `projection`: tool context retention, the request-time projection of old turns (§13.1);
- `clearing`: clearing the running turn's oldest tool results (§13.4);
- `calibration`: the trim by provider-reported usage (§10.3, §16.2);
- `meter`: the context meter and the input cost (§10.5);
- `overflow`: recognising a provider's context-window overflow (§10.4);
- `recovery`: overflow recovery, which never grows the request (§10.1);
- `saturation`: 64-bit counts that saturate instead of overflowing (§9).
"""
