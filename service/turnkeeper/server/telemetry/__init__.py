"""What the sidecar tells about itself: Prometheus metrics, OpenTelemetry traces, logs.

`metrics.py` holds every collector (served at /metrics by `ops/http.py`; the lock-free families
in `metric_families.py`), `tracing.py` the span
per RPC, `logs.py` the text/JSON log setup with call ids. What records each call into all three
is `edge/access_log.py`, run by the edge around every handler.
"""
