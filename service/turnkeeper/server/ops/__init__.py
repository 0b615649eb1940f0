"""What operators and orchestrators see: the ops HTTP port, health, the dashboard.

`http.py` serves /metrics, /healthz and /readyz (aiohttp, in the sidecar's loop); `dashboard/`
adds the live page and its event stream to that port.
"""
