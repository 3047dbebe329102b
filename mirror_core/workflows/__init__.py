"""Operator workflows (failover, failback, cutover, DR drill): the logic the DAGs run, importable
and testable without Airflow. Every step that changes something records who, when, why and which run.

``params`` validates a DAG's Params against a typed spec; ``plans`` holds the frozen plans the tasks
pass to each other (``to_xcom()`` / ``from_xcom()``), ``render`` the approval bodies; ``steps`` is what
each DAG task calls; ``failover``, ``cutover``, ``drill`` and ``control`` do the work."""
