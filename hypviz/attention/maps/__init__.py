r"""The maps and their kernels: each kind's scores, map and operands, computed exactly.

:func:`attention_map` and :func:`scores` compute a kind's dense ``(..., N, M)`` map from points of the Lorentz model;
:func:`top_attention` lists each row's strongest keys.  A kind's computation is a :class:`Kernel`
(:mod:`~hypviz.attention.maps.kernels`): its operands for the streamed comparison, its rounding bound, its dense map;
a new computation subclasses :class:`Kernel` and registers it (:func:`register_kernel`).  Modules:
:mod:`~hypviz.attention.maps.checks` (the argument checks), :mod:`~hypviz.attention.maps.kernels`,
:mod:`~hypviz.attention.maps.dense` (:func:`scores`, :func:`attention_map`, the focused map) and
:mod:`~hypviz.attention.maps.top_keys` (:func:`top_attention`).

>>> from hypviz import lorentz
>>> q = lorentz.lift([[0.0, 0.0], [1.0, 0.0]])
>>> attention_map(q, q, kind="distance").sum(-1).tolist()
[1.0, 1.0]
"""

from hypviz.attention.maps.checks import resolve_device
from hypviz.attention.maps.dense import (
    KINDS,
    MODEL_KINDS,
    SOFTMAX_KINDS,
    attention_map,
    focused_linear_attention,
    focused_linear_map,
    scores,
)
from hypviz.attention.maps.kernels import Kernel, Operands, Option, register_kernel, unregister_kernel
from hypviz.attention.maps.top_keys import TopKeys, top_attention

__all__ = ["KINDS", "SOFTMAX_KINDS", "MODEL_KINDS", "scores", "attention_map", "focused_linear_map", "focused_linear_attention",
           "TopKeys", "top_attention", "Kernel", "Operands", "Option", "register_kernel", "unregister_kernel", "resolve_device"]
