"""``python -m hypviz.cli ARGS``: the ``hypviz`` command (:func:`hypviz.cli.main`)."""

import sys

from hypviz.cli.command import main

sys.exit(main())
