"""What every room of the server agrees on, below all of them: the rich gRPC errors (`errors.py`),
request decoding (`wire.py`, MALFORMED_REQUEST), the service's method paths (`methods.py`), a
request's CallerContext (`caller.py`), the request-size limits (`limits.py`), the history rules
(`history_rules.py`) and the rules on a request's own fields (`validation.py`). It depends on
`core/` and `telemetry/` only, so the API, the engines, the edge and the feed all depend downward
on it.
"""
