"""Figures (matplotlib and plotly): they take tensors or arrays and return figures.

``hypviz.plots`` never computes geometry itself; it calls :mod:`hypviz.lorentz` and :mod:`hypviz.attention`
(which kinds exist, and their titles, come from :mod:`hypviz.base.kinds`).  The package's face is this
docstring: import the submodule that draws the picture you want, one per kind of picture:

``manifold_mpl``     the hyperboloid sheet, Poincare and Klein disks, geodesics, attention on the manifold (matplotlib)
``manifold_plotly``  the same figures in plotly (both draw the scenes of ``scenes``, built once from the inputs)
``curves``           numerical-error and bound curves for the derivation notebooks
``attention``        attention heatmaps, difference maps and comparison curves (``sweeps``: the sweep curves)
``explorables``      interactive plotly figures with sliders that need no kernel, a PNG still beside each (``stills``)
``style``            the shared colours and sizes

The import order, one way: ``style`` -> ``_common`` -> ``sweeps`` -> ``curves``, ``attention``; ``scenes`` ->
``manifold_mpl``, ``manifold_plotly`` -> ``explorable_parts`` (with ``stills``) -> ``explorables``.
"""
