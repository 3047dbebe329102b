"""The replication data path: progress store, topic management, the replicator and heartbeats."""
