"""The HistoryService itself: what each call means, from request bytes to response bytes.

`servicer.py` registers the raw-bytes handlers and runs engine work in a worker pool; `rpcs.py`
holds each unary RPC as a plain function; `validation.py` every request rule; `errors.py` the rich
gRPC errors; `wire.py` request decoding (MALFORMED_REQUEST); `caller.py` a request's
CallerContext; `methods.py` the service name and the method paths other rooms match on.
"""
