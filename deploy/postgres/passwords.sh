#!/bin/sh
# Runs once, after init.sql, when the compose PostgreSQL volume is created (sourced by the image's entrypoint,
# as the postgres user): gives the roles airflow and mirror the passwords the postgres service generated into
# the db-secrets volume. Their readers get them from pgpass files beside them, never from a URL.
set -e
for role in airflow mirror; do
  password="$(cat "${DB_SECRETS:-/run/db-secrets}/$role.password")"
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -v role="$role" -v password="$password" \
    <<'SQL'
ALTER ROLE :"role" WITH LOGIN PASSWORD :'password';
SQL
done
