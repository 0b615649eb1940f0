"""Everything a call passes before it reaches the servicer, and the sockets it arrives on.

`server.py` builds the grpc.aio server: its channel options and its interceptors, outermost
first: the access log (`access_log.py`), bearer-token authentication (`auth.py`), admission
control (`admission.py`); both of the last refuse with `handlers.refusal`, which never reads
the request. `listeners.py` binds TCP addresses and Unix sockets; `security.py` wires TLS (`tls.py`)
and tokens as configured.
"""
