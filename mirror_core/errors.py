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
    """A group's coordinator gave this process's group.instance.id (--instance-id) to a newer join: of
    another process (this one must then stop rather than take the partitions back, which would fence the
    other) or of this one (replication/fencing.py tells which)."""

    def __init__(self, message: str, group: str, member_id: str) -> None:
        super().__init__(message)
        self.group = group
        #: the member id the fenced consumer last had ("" if none)
        self.member_id = member_id
