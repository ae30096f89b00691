# The Vigil operator image. Build it with `make image` (scripts/image.sh), which prepares the
# build context and prints the image's name, vigil:<version>.
#
# The build context is not the repository but a directory holding wheels/ only:
#   wheels/deps/   every dependency (with the PostgreSQL driver) as binary wheels for CPython 3.11
#   wheels/vigil/  the project's own wheel
# made on the host by scripts/image.sh, because pip inside a build container has neither a
# registry it trusts nor, here, a network (the build runs with --network none). Installing with
# --no-index proves the image needs nothing else.
#
# PYTHON_IMAGE is any base with CPython 3.11 as `python3` and its venv module: python:3.11-slim
# (python in /usr/local/bin) or, where no image registry can be reached, the Debian bookworm root
# scripts/image.sh makes with debootstrap (python3 and python3-venv from Debian, in /usr/bin).
# Two stages: the builder installs the wheels into a virtualenv; the final image copies only
# that virtualenv, less pip and setuptools (nothing installs at run time), so no wheel ships. The virtualenv sits at the same path in both
# stages (its scripts' #! lines point there) on the same base image (its python3 symlink points
# into the base's interpreter, wherever that base keeps it).
# At run time the root filesystem is read-only: bytecode is compiled at build time and Python is
# told not to write any.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/vigil
# Dependencies first, in their own layer: a change to the operator's code reinstalls only it.
COPY wheels/deps/ /wheels/deps/
RUN /opt/vigil/bin/pip install --quiet --no-index /wheels/deps/*.whl
COPY wheels/vigil/ /wheels/vigil/
RUN /opt/vigil/bin/pip install --quiet --no-index --find-links /wheels/deps \
      "$(ls /wheels/vigil/vigil-*.whl)[postgres]" \
 && /opt/vigil/bin/pip check \
 && /opt/vigil/bin/pip uninstall --quiet --yes pip setuptools \
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
