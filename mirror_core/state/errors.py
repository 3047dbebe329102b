"""State-store errors."""


class StateStoreError(Exception):
    """The state store could not be reached, migrated or written."""
