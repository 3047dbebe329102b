"""Typed errors of the replication service (one line each; config errors live in config/errors.py)."""


class MirrorError(Exception):
    """Base class of every error mirror_core raises on purpose."""


class ClusterUnavailable(MirrorError):
    """A cluster did not answer within the allowed time."""


class ProgressError(MirrorError):
    """The progress store on the target could not be read or written."""


class ReadIncomplete(MirrorError):
    """A read of a partition could tell neither a record nor its end within its time limit."""


class FencedInstance(MirrorError):
    """Another process joined a group with this process's group.instance.id (--instance-id): the newest
    member wins, so this one must stop rather than take the partitions back (which would fence the other)."""
