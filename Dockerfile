# syntax=docker/dockerfile:1
# The turnkeeper sidecar image. Stage 1 builds wheels: the client distribution that carries the
# generated code, and the service with its native engine (service/turnkeeper-native, built by
# setuptools-rust with this stage's cargo into turnkeeper._native). Stage 2 is a slim runtime that runs as a non-root
# user. tests/service/test_deploy.py runs exactly its ENTRYPOINT + CMD with its ENV.

FROM rust:1.91-slim-bookworm AS build
# Debian bookworm's python3 is 3.11, as in the runtime stage, so native wheels match it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-dev python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir build==1.2.2.post1 \
 && /opt/build/bin/python -m build --wheel --outdir /wheels clients/python \
 && /opt/build/bin/python -m build --wheel --outdir /wheels .

FROM python:3.11-slim-bookworm
RUN groupadd --system --gid 10001 turnkeeper \
 && useradd --system --uid 10001 --gid turnkeeper --no-create-home --shell /usr/sbin/nologin turnkeeper
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --find-links /tmp/wheels /tmp/wheels/*.whl && rm -rf /tmp/wheels
COPY deploy/turnkeeper.toml /etc/turnkeeper/turnkeeper.toml
# The Unix socket directory; Kubernetes mounts an emptyDir here to share it with the runtime.
RUN install -d -o turnkeeper -g turnkeeper -m 0750 /run/turnkeeper
ENV PYTHONUNBUFFERED=1 \
    TURNKEEPER_LOG_FORMAT=json
USER 10001:10001
# gRPC, and the ops HTTP port (/metrics, /healthz, /readyz).
EXPOSE 50051 9464
# The ops port speaks HTTPS when gRPC has TLS (the check trusts any certificate: it is loopback).
HEALTHCHECK --interval=10s --timeout=3s \
  CMD ["python", "-c", "import ssl, urllib.request as r\ntry: r.urlopen('https://127.0.0.1:9464/readyz', timeout=1, context=ssl._create_unverified_context())\nexcept OSError: r.urlopen('http://127.0.0.1:9464/readyz', timeout=1)"]
ENTRYPOINT ["turnkeeper-server"]
CMD ["--config", "/etc/turnkeeper/turnkeeper.toml"]
