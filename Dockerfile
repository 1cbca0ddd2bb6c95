# One image for the API and the worker: `rankzero api` / `rankzero worker` (see docker-compose.yml).
# torch comes from PyPI through the project's pins; on Linux x86_64 that wheel is the CUDA build
# (it brings its own CUDA runtime libraries), so the host needs only the NVIDIA driver and the
# NVIDIA Container Toolkit.

# --- front-end libraries from the npm registry (web/package.json + lockfile; the checkers, devDependencies, stay out) ---
FROM node:22-bookworm-slim AS web
WORKDIR /web
COPY web/package.json web/package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error \
 && mkdir -p vendor/swagger-ui \
 && cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css vendor/ \
 && cp node_modules/swagger-ui-dist/swagger-ui-bundle.js node_modules/swagger-ui-dist/swagger-ui.css vendor/swagger-ui/

# --- the service ---
FROM python:3.11-slim-bookworm
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RANKZERO_DATA_DIR=/data \
    RANKZERO_RUNS_DIR=/runs \
    RANKZERO_DATASETS_DIR=/datasets \
    RANKZERO_HOST=0.0.0.0 \
    RANKZERO_PORT=8000
# bubblewrap: every job runs in a sandbox (worker/sandbox.py; docs/security.md "The job sandbox");
# libseccomp2: the job's seccomp filter is built with it (pyseccomp loads it: worker/sandbox_seccomp.py).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libseccomp2 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 1000 rankzero \
 && useradd --system --uid 1000 --gid rankzero --home-dir /home/rankzero --create-home rankzero \
 && mkdir -p /app /data /runs /datasets /environments \
 && chown rankzero:rankzero /data /runs /datasets /environments \
 && chmod 0700 /data
WORKDIR /app
# Dependencies first (a layer that survives code and README edits): install the pinned set, then the code.
COPY pyproject.toml ./
RUN mkdir -p core trainer api worker cli rankzero \
 && touch README.md core/__init__.py trainer/__init__.py api/__init__.py worker/__init__.py cli/__init__.py rankzero/__init__.py \
 && pip install . && pip uninstall -y rankzero
COPY core ./core
COPY trainer ./trainer
COPY api ./api
COPY worker ./worker
COPY cli ./cli
COPY rankzero ./rankzero
COPY README.md ./
COPY web/templates ./web/templates
COPY web/static ./web/static
COPY --from=web /web/vendor ./web/static/vendor
RUN pip install --no-deps -e . && python -c "import api.app, worker.tasks, cli.main, rankzero"
USER rankzero
EXPOSE 8000
# The API's health route on RANKZERO_HOST:RANKZERO_PORT; the worker service in docker-compose.yml
# checks the worker instead (`rankzero healthcheck worker`).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["rankzero", "healthcheck", "api"]
# The API binds RANKZERO_HOST:RANKZERO_PORT (0.0.0.0:8000 unless set). `docker stop` gives 10 s before
# SIGKILL; give the API 30 s (`docker run --stop-timeout 30`), a worker 120 s (ranks checkpoint).
CMD ["rankzero", "api"]
