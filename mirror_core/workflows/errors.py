"""Typed errors of the workflows (one line each)."""

from __future__ import annotations

from mirror_core.errors import MirrorError


class WorkflowError(MirrorError):
    """A workflow step cannot go on; the message says what to check."""


class ParamError(WorkflowError):
    """A DAG Param is invalid; the message names the Param."""
