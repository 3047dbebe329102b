# mirror_core service image: the replication service (mirror-1, mirror-2 in docker-compose.yml).
# Airflow's image is docker/airflow.Dockerfile; Spark, Prometheus and Grafana use official images.

# The gssapi package (the batch path's Kerberos) has no Linux wheel on PyPI: its wheel is built here, against
# MIT Kerberos's headers (libkrb5-dev, whose krb5-config the sdist asks) and with a compiler, neither of which
# goes into the service image.
FROM python:3.11-slim AS gssapi-wheel
ENV PIP_NO_CACHE_DIR=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libkrb5-dev \
    && rm -rf /var/lib/apt/lists/*
COPY constraints.txt /tmp/
RUN pip wheel --no-deps -c /tmp/constraints.txt --wheel-dir /wheels gssapi

FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# The MIT GSS-API library the gssapi wheel is linked with (run time only).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgssapi-krb5-2 \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first (cached layer), pinned by the same constraints file the test suite uses; the gssapi wheel
# is mounted from the stage above for this step only (BuildKit, docker compose's default builder).
COPY pyproject.toml constraints.txt README.md ./
COPY mirror_core ./mirror_core
RUN --mount=type=bind,from=gssapi-wheel,source=/wheels,target=/wheels \
    pip install --find-links /wheels -c constraints.txt . \
    && useradd --system --uid 10001 mirror
COPY examples ./examples

USER mirror
EXPOSE 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["mirror-core"]
CMD ["run", "--config", "/app/examples/docker-mm2.properties", "--metrics-port", "9464", "--metrics-host", "0.0.0.0"]
