"""The ``hypviz`` command: ``hypviz compare`` (points or a capture file) and its report (see ``hypviz --help``)."""

from hypviz.cli.main import build_parser, main

__all__ = ["main", "build_parser"]
