# The eaglefeed image used by compose.yaml (producer, generate workers, sink).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY eaglefeed eaglefeed
COPY producers producers
COPY consumers consumers
COPY schemas schemas
RUN pip install --no-cache-dir .
ENTRYPOINT []
