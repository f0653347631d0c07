# syntax=docker/dockerfile:1
# kai: one image for every component (kai scheduler | binder | podgrouper | controller | webhook).
#   docker build -t REGISTRY/kai:0.1.0 .
#   docker run --rm REGISTRY/kai:0.1.0 --help
# Stage 1 builds a wheel of kai (the distribution kai-gitops-scheduler) and the wheels of its
# runtime dependencies; stage 2 installs them into a virtual environment on a slim Python base
# and runs as a non-root user.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY controllers ./controllers
RUN python -m pip wheel --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim-bookworm
LABEL org.opencontainers.image.title="kai" \
      org.opencontainers.image.description="A GitOps-first Kubernetes scheduler for GPU and AI workloads, compatible with NVIDIA KAI Scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/kai/bin:$PATH
COPY --from=build /wheels /wheels
RUN python -m venv /opt/kai \
    && /opt/kai/bin/pip install --no-index --find-links=/wheels kai-gitops-scheduler \
    && rm -rf /wheels \
    && groupadd --system --gid 10001 kai \
    && useradd --system --uid 10001 --gid kai --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin kai
# the Deployments mount an emptyDir on /tmp (read-only root filesystem)
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080 9443
ENTRYPOINT ["kai"]
CMD ["--help"]
