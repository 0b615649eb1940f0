"""Everything a call passes before it reaches the servicer.

The interceptors, outermost first: tracing (`telemetry.tracing`, when on), the edge interceptor
(`interceptor.py`: the access log of `access_log.py`, the metrics and the admission control of
`admission.py`, in one pass), then bearer-token authentication (`auth.py`). Refusals that need only
the headers never read the request (`refusal.py`). TLS for the TCP listeners is `tls.py`.
"""
