"""The ``hypviz`` command: ``hypviz compare`` (points or a capture file) and its report (see ``hypviz --help``).

Its parser, commands and :func:`main` are in :mod:`hypviz.cli.command`; ``python -m hypviz.cli`` runs it.
"""

from hypviz.cli.command import build_parser, main

__all__ = ["main", "build_parser"]
