r"""Distance attention approximated: random features, each row's top keys with a fitted tail, and the key search.

:func:`distance_linear_attention` estimates the distance map by positive random features in linear time
(:mod:`~hypviz.attention.approx.random_features`, the kind ``"distance_rf"``); :func:`distance_topk_attention` takes
each row's exact top keys and a fitted positive tail, with a proven per-row bound
(:mod:`~hypviz.attention.approx.topk_tail`, the kind ``"distance_topk"``); :func:`exact_top_keys` and
:func:`search_top_keys` find the strongest keys (:mod:`~hypviz.attention.approx.key_search`).  Importing this room
registers the kernels of its two kinds.

>>> from hypviz import lorentz
>>> q = lorentz.lift([[0.0, 0.0], [1.0, 0.0]])
>>> bool(distance_topk_attention(q, q, temperature=1.0).met.all())  # every row within its target, proven
True
"""

from hypviz.attention.approx.key_search import KeyIndex, KeySearch, TopKeyLogits, exact_top_keys, fit_key_index, search_top_keys
from hypviz.attention.approx.random_features import distance_linear_attention
from hypviz.attention.approx.topk_tail import TopkTail, distance_topk_attention

__all__ = ["distance_linear_attention", "distance_topk_attention", "TopkTail", "TopKeyLogits", "exact_top_keys", "KeySearch",
           "search_top_keys", "KeyIndex", "fit_key_index"]
