"""The ``mirror-core`` command line (``main``), in modules: ``main`` (the parser and the service's own
commands), ``tools`` (offsets, topics, clusters), ``common`` (what they share)."""

from mirror_core.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
