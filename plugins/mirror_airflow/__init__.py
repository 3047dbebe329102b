"""Airflow glue for mirror_core: hooks, thin operators/sensors, and the status page."""
