"""The HistoryService itself: what each call means, from request bytes to response bytes.

`servicer.py` registers the raw-bytes handlers and runs engine work in a worker pool; `rpcs.py`
holds each unary RPC as a plain function, with the limits it trims by (`trim_limits.py`), the
messages it answers (`responses.py`), the capacity pre-flight (`capacity_gate.py`) and a trim's
log line, metrics and trace attributes (`trim_telemetry.py`). The rules they check and the errors
they answer are the contract's (`server/contract/`).
"""
