"""Operator workflows (failover, failback, cutover, DR drill): the logic the DAGs run, importable
and testable without Airflow. Every step that changes something records who, when, why and which run."""
