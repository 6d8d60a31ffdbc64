# pod-gpu-metrics-exporter container image.
#
#   docker build -t pod-gpu-metrics-exporter .
#   docker run -v /var/lib/kubelet/pod-resources:/var/lib/kubelet/pod-resources:ro \
#       --network host pod-gpu-metrics-exporter            # serve on :9400
#   docker run -p 9400:9400 pod-gpu-metrics-exporter demo --web.listen-address :9400
#       # simulated node, no GPU needed (the demo binds 127.0.0.1 unless told otherwise)
#
# BASE_IMAGE may be any image with a Debian-style `python3` that has the venv module
# (the official python images, or Debian with python3 + python3-venv).
#
# Offline builds: put the project's wheel and every dependency's wheel in a `wheels/`
# folder of the build context (`pip wheel -w wheels .` on a machine with the same Python
# minor version); the build then installs from it with --no-index and needs no network
# (`--network none` works). Without `wheels/`, the builder stage fetches from PyPI.
ARG BASE_IMAGE=python:3.12-slim

# Stage 1: a wheelhouse holding the project's wheel and all its dependencies.
FROM ${BASE_IMAGE} AS build
WORKDIR /src
# The context is an allow-list (.dockerignore): sources, metadata and an optional wheels/.
COPY . .
RUN python3 -m venv /opt/build-venv \
    && if ls wheels/*.whl >/dev/null 2>&1; then \
         mkdir /wheelhouse && cp wheels/*.whl /wheelhouse/; \
       else \
         /opt/build-venv/bin/pip wheel --no-cache-dir --wheel-dir /wheelhouse .; \
       fi

# Stage 2: the runtime venv, installed from the wheelhouse only (never from an index),
# so what the first stage resolved is exactly what ships.
FROM ${BASE_IMAGE} AS venv
COPY --from=build /wheelhouse /wheelhouse
# pip itself is not needed at run time: removing it keeps the image smaller and leaves
# no installer inside a container that runs as root.
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse \
         pod-gpu-metrics-exporter \
    && /opt/venv/bin/python -m pip uninstall --yes --quiet pip

# Stage 3: the base image plus the venv; same base as stage 2, so the venv's
# interpreter symlink points at the same python3.
FROM ${BASE_IMAGE}
COPY --from=venv /opt/venv /opt/venv
# PYTHONDONTWRITEBYTECODE: the DaemonSet runs with a read-only root filesystem.
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# No USER: the kubelet's pod-resources socket is root-owned (srw-------/srw-rw----), so
# the process must be root to connect; the DaemonSet drops every capability instead.
EXPOSE 9400
# Exec form: the exporter is PID 1 and receives SIGTERM from `docker stop` directly.
ENTRYPOINT ["pod-gpu-metrics-exporter"]
