-- Runs once, when the compose PostgreSQL volume is created: one database per consumer.
-- airflow:       Airflow's metadata database (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN).
-- mirror_state:  mirror_core's state store (--state-db of the mirrors, MIRROR_CORE_DB_URL of the DAGs);
--                its schema is created and migrated by mirror_core itself (Alembic).
-- The roles get their passwords from passwords.sh (generated at first start, never written here).
CREATE USER airflow;
CREATE DATABASE airflow OWNER airflow;
CREATE USER mirror;
CREATE DATABASE mirror_state OWNER mirror;
