"""Everything a call passes before it reaches the servicer, and the sockets it arrives on.

`server.py` builds the grpc.aio server: its channel options and its interceptors, outermost
first: tracing (`telemetry.tracing`, when on), then the edge, which wraps each handler
as it is registered (`wrapper.py`) and passes every call through its stages (`pipeline.py`:
bearer-token authentication of `auth.py`, load shedding, the admission control of `admission.py`,
the access log of `access_log.py` and the metrics); refusals that need only the headers use
`handlers.refusal`, which never reads the request. `listeners.py` binds TCP addresses and Unix
sockets; `security.py` wires TLS (`tls.py`) and tokens as configured.
"""
