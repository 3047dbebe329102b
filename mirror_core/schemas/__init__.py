"""Schema registries: copying subjects between them (sync.py) and the records' schema ids the mirror translates
on the way (ids.py), over a registry's Confluent-compatible REST API (registry.py)."""
