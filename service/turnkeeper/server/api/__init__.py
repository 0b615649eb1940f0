"""The HistoryService itself: what each call means, from request bytes to response bytes.

`servicer.py` registers the raw-bytes handlers and runs engine work in a worker pool; `rpcs.py`
holds each unary RPC as a plain function. The rules they check and the errors they answer are the
contract's (`server/contract/`).
"""
