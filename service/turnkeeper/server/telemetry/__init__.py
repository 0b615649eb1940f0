"""What the sidecar tells about itself: Prometheus metrics, OpenTelemetry traces, logs.

`metrics.py` holds every collector (served at /metrics by `ops/http.py`; the lock-free families
in `metric_families.py`), `tracing.py` the span per RPC, `logs.py` the log setup: the call's ids
in `call_ids.py`, the text and JSON lines in `log_format.py`, the handler that batches them per
loop turn (and `log_line`) in `log_handler.py`. What records each call into all three is
`edge/access_log.py`, run by the edge around every handler.
"""
