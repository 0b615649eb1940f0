"""Everything a call passes before it reaches the servicer, and the sockets it arrives on.

`server.py` builds the grpc.aio server: its channel options and its interceptors, outermost
first: tracing (`telemetry.tracing`, when on), the edge interceptor (`interceptor.py`: the access
log of `access_log.py`, the metrics and the admission control of `admission.py`, in one pass),
then bearer-token authentication (`auth.py`); refusals that need only the headers use
`handlers.refusal`, which never reads the request. `listeners.py` binds TCP addresses and Unix
sockets; `security.py` wires TLS (`tls.py`) and tokens as configured.
"""
