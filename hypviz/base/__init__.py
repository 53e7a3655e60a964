"""The base layer: argument checks, messages, the registry of attention kinds, the bounds, memory and mpmath references.

Nothing here imports another layer of hypviz; :mod:`hypviz.base.kinds` and :mod:`hypviz.base.validate`
do not import torch.
"""
