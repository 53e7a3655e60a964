"""The reports behind ``hypviz compare``: checked inputs, the analyses, their figures and their HTML pages.

Data flows one way: :mod:`~hypviz.reports.inputs` and :mod:`~hypviz.reports.input_files` (what the command
reads) -> :mod:`~hypviz.reports.point_report` and :mod:`~hypviz.reports.model_report` (the analyses) ->
:mod:`~hypviz.reports.figures` -> :mod:`~hypviz.reports.html` (pages from ``templates/``), published
atomically by :mod:`~hypviz.reports.publishing`.
"""
