"""Everything a call passes before it reaches the servicer.

The interceptors, outermost first: the access log (`access_log.py`), bearer-token authentication
(`auth.py`) and admission control (`admission.py`). TLS for the TCP listeners is `tls.py`.
"""
