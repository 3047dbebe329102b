# mirror_core service image: the replication service (mirror-1, mirror-2 in docker-compose.yml).
# Airflow's image is docker/airflow.Dockerfile; Spark, Prometheus and Grafana use official images.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# Dependencies first (cached layer), pinned by the same constraints file the test suite uses.
COPY pyproject.toml constraints.txt README.md ./
COPY mirror_core ./mirror_core
RUN pip install -c constraints.txt . \
    && useradd --system --uid 10001 mirror
COPY examples ./examples

USER mirror
EXPOSE 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["mirror-core"]
CMD ["run", "--config", "/app/examples/docker-mm2.properties", "--metrics-port", "9464", "--metrics-host", "0.0.0.0"]
