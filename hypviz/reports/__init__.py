"""The reports behind ``hypviz compare``: checked inputs, the analyses, their figures, their HTML pages, their files.

Data flows one way, and no module imports one after it (also inside functions): :mod:`~hypviz.reports.input_files`
-> :mod:`~hypviz.reports.inputs` (what the command reads, checked) -> :mod:`~hypviz.reports.point_report` ->
:mod:`~hypviz.reports.model_report` (the analyses and their numbers) -> :mod:`~hypviz.reports.figures` ->
:mod:`~hypviz.reports.html` (pages from ``templates/``) -> :mod:`~hypviz.reports.writing` (the files of a report);
:mod:`~hypviz.reports.publishing` puts the folder in place atomically.  :mod:`~hypviz.reports.runs` is the whole
job of each sub-command of ``hypviz``, one entry each (:func:`compare_report`, :func:`capture_report`,
:func:`demo_report`): the command parses its arguments, calls one of them and prints what it returns.
"""

from hypviz.reports.runs import Published, capture_report, compare_report, demo_report

__all__ = ["Published", "compare_report", "capture_report", "demo_report"]
