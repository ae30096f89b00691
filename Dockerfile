# syntax=docker/dockerfile:1
# The Vigil operator image.
#
#   docker build -t vigil:0.1.0 .
#
# Two stages: the builder turns the project and every dependency (with the PostgreSQL driver) into
# wheels and installs them into a virtualenv; the final image copies only that virtualenv, so no
# compiler, pip cache or source tree ships. The virtualenv sits at the same path in both stages
# (its scripts' #! lines point there) on the same base image (its python symlink points into it).
# At run time the root filesystem is read-only: bytecode is compiled at build time and Python is
# told not to write any.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/vigil
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN /opt/vigil/bin/pip wheel --wheel-dir /wheels ".[postgres]" \
 && /opt/vigil/bin/pip install --no-index --find-links /wheels "vigil[postgres]" \
 && /opt/vigil/bin/python -m compileall -q /opt/vigil/lib \
 && /opt/vigil/bin/vigil --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="vigil" \
      org.opencontainers.image.description="Kubernetes operator: scheduled jobs, durable workflows, and alerts for what did not happen" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/vigil/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/vigil /opt/vigil
# 65532: the conventional unprivileged "nonroot" uid/gid; the chart runs it with runAsNonRoot.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 9090
ENTRYPOINT ["vigil"]
CMD ["operator", "--config", "/etc/vigil/config.yaml"]
