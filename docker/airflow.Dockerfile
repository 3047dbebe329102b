# Airflow image for the compose stack: the official Airflow 3.3.2 image (the version pyproject pins) plus
# mirror_core (the DAGs and the plugin import it), a Java runtime for spark-submit (client mode against
# spark://spark-master:7077) and Spark's Kafka source jars, fetched at build time.
FROM apache/airflow:3.3.2-python3.11

USER root
# default-jre-headless: Java 17 or 21 depending on the Debian release; Spark 4 runs on both.
# Maven is needed once, to fetch Spark's Kafka source jars (mirror_core.devcluster.spark_packages).
# gcc and libkrb5-dev build the gssapi package (mirror_core's Kerberos; no Linux wheel on PyPI) at pip install.
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless maven gcc libc6-dev libkrb5-dev \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /app /opt/airflow/auth /opt/airflow/reconcile /opt/mirror-core-cache \
    && chown -R airflow:0 /app /opt/airflow/auth /opt/airflow/reconcile /opt/mirror-core-cache \
    && chmod -R g+rwX /app /opt/airflow/auth /opt/airflow/reconcile /opt/mirror-core-cache

USER airflow
ENV MIRROR_CORE_CACHE=/opt/mirror-core-cache
WORKDIR /app
# Editable install from /app: the reconciliation DAG submits /app/spark_jobs/reconcile_checkpoints.py
# (mirror_core.reconciliation.JOB is relative to the package). Same constraints file as the test suite.
COPY --chown=airflow:0 pyproject.toml constraints.txt README.md ./
COPY --chown=airflow:0 mirror_core ./mirror_core
COPY --chown=airflow:0 spark_jobs ./spark_jobs
COPY --chown=airflow:0 examples ./examples
RUN pip install --no-cache-dir -c constraints.txt -e '.[airflow,spark]' \
    && python -m mirror_core.devcluster.spark_packages \
    && rm -rf /home/airflow/.m2
WORKDIR /opt/airflow
