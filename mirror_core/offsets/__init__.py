"""Failover-grade offsets: the exact offset map, translation, checkpoints and group offset sync."""
