"""mirror_core's records on the target cluster: progress, the offset map (offset syncs), their record
codecs and the internal topics that hold them. Below both ``replication`` (which writes them) and
``offsets`` (which reads them); imports nothing of either (an import-linter contract in ``make test``)."""
