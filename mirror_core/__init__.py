"""mirror_core: cross-cluster Apache Kafka replication for disaster recovery and migration.

Convention used everywhere in this package: a *position* or *progress offset* is always
"the next offset to read" (Kafka's committed-offset convention), never "the last offset read".
"""

__version__ = "0.1.0"
