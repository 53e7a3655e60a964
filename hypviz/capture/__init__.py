r"""Record the attention of a real hyperbolic transformer with forward hooks.

::

    from hypviz import capture
    with capture.attention(model) as cap:        # hooks on; removed on exit, also on an exception
        model(x)                                 # outputs unchanged (the hooks return None)
    cap.layers                                   # list[LayerRecord], in the order the layers ran
    cap.save("att.pt")                           # one torch.save file, written atomically
    records = capture.load("att.pt")             # torch.load(weights_only=True), validated

Each :class:`LayerRecord` holds one call of one attention layer: its ``queries`` ``(H, N, d + 1)``,
``keys`` ``(H, M, d + 1)`` and ``values`` ``(H, M, d_v + 1)`` (or ``None``), points of the Lorentz
model :math:`\langle x, x\rangle_L = -k`, time coordinate first, heads first, detached copies on
the CPU in the dtype the model made them in, together with what the layer computes from them
(``kind`` and its parameters), so that :func:`hypviz.attention.attention_map` and
:func:`hypviz.attention.compare` can be run on them directly (:meth:`LayerRecord.attention_map`).

Two ways a layer is found:

* **Hypformer-style layers, by structure** (no Hypformer code is imported): a submodule with ``Wq``
  and ``Wk``, ``nn.ModuleList`` s of per-head maps from ``(N, d_in)`` features to ``(N, d + 1)``
  hyperboloid points, an optional ``Wv`` (when it is absent, or ``use_weight`` is false, the values
  are the layer's source input), ``attention_type`` (``"linear_focused"`` or ``"full"``),
  ``power_k``, ``norm_scale``, ``scale`` and ``manifold.k``.  ``"linear_focused"`` is recorded as
  kind ``"focused"`` with ``power = power_k`` and ``norm_scale``; ``"full"`` as kind ``"distance"``
  at the temperature :math:`\tau = k\,\mathrm{scale}/2` when the layer's ``manifold.cinner``
  divides the Lorentzian inner product by :math:`k` (Hypformer's ``large/`` and ``medium/`` trees;
  measured on the layer's own points), :math:`\tau = \mathrm{scale}/2` when it does not (its
  simplified tree), because with keys written :math:`\kappa`

  .. math::

      \frac{2 + 2\langle q, \kappa\rangle_L / k}{\mathrm{scale}} + b
      = \frac{-\tfrac12\|q - \kappa\|_L^2}{k\,\mathrm{scale}/2} + b

  (identity 1, :math:`\langle q, \kappa\rangle_L = -\tfrac12\|q - \kappa\|_L^2 - k`) and the
  constant :math:`b` cancels in the row softmax.  Logits written without the :math:`1/k`,
  :math:`(2 + 2\langle q, \kappa\rangle_L)/\mathrm{scale} + b`, are the same distance softmax
  at :math:`\tau = \mathrm{scale}/2`; the two agree at :math:`k = 1`.
* **The field's other families, by structure** (:mod:`hypviz.capture.family_readers`, which names the file and
  commit each reader was written from): HyperCore's ``LorentzMultiheadAttention`` and HELM's copy of it
  (:math:`\tau = \mathrm{scale}/2`, masks, RoPE, heads concatenated by ``final_linear``), HELM's HMLA
  ``LorentzMLA`` (latent keys, latent queries when ``q_lora_rank > 0``, RoPE on part of the dimensions), HyboNet's
  machine-translation ``LorentzMultiHeadedAttention`` (:math:`\tau = \mathrm{scale}/2`, ``mid_point`` per head, padding mask,
  ``layer_cache``), the Lorentz GCN gate as HyboNet and HyperCore ship it (kind ``"sigmoid"``, rows not
  normalised, times the adjacency) and HNN++-style Poincare-ball attention (kind ``"poincare"``,
  :math:`\mathrm{softmax}(-d/\tau)`, gyromidpoint).  A mask the layer applies is recorded
  (``LayerRecord.mask``) and the record's map is the masked one; heads concatenated by a learned map are
  verified per head on what enters that map (``LayerRecord.checked`` names the step).  A module that looks like
  attention but matches none is named in one line, with how to capture it.
* **A new family** is one :class:`Reader` subclass (which submodules are the queries, keys and values, the
  temperature rule, the aggregation, where the mask comes from) added with :func:`register` (``first=True``: before
  the built-in readers); its family becomes a valid ``mode`` (:func:`modes`).  A reader that computes its points
  itself uses :func:`heads_first`, :func:`attended_keys` and :func:`wrap_method`.  Every record names the reader that
  made it and, for a reader or kind of another package, the module another process must load
  (``LayerRecord.plugins``): an entry point of group ``hypviz.readers`` (or ``hypviz.kinds``) loads it there by
  itself, ``hypviz --plugin MODULE`` by hand (:mod:`hypviz.base.plugins`).
* **Any other model, by name**: ``layers={"enc.0": ("enc.0.q", "enc.0.k"[, "enc.0.v"])}`` names the
  modules whose outputs are the queries, keys (and values); ``k`` is then required and ``kind``,
  ``temperature``, ``power``, ``norm_scale`` say what the layer computes (mode ``"generic"``; its
  output is not seen, so these records are *not verified*).

**The capture checks itself.**  Every record of a layer read by structure is verified
(:mod:`hypviz.capture.verification`): the layer's output is rebuilt from the recorded queries, keys, values
and map with the layer's own aggregation and compared with what the layer returned; the relative
error is stored (``verify_error``, held to :math:`\sqrt{\varepsilon}` of the model's dtype) with what was
compared (``checked_output``) and the digests of the fields a verdict depends on, so that a report redoes the
check from the file (:func:`hypviz.capture.verification.recheck`; a stored verdict alone is never trusted).  That
re-check detects accidental and partial edits of a file, not a record rewritten whole with its digests
recomputed (they are not a signature).  A masked map is the softmax over the kept keys, exact at any norm.  Where
the layer's attributes give :math:`\tau` it is verified at that :math:`\tau` only (a layer not reproduced there is
*not verified*, with a warning naming the :math:`\tau` that does); one :math:`\tau` per call is measured only
where no attribute gives it, and refused when the outputs fix it no better than the dtype's rounding.  The records
also hold the model's dtype (float16/bfloat16 points are stored in float32
with the time coordinate recomputed), train/eval (a warning when dropout was active), the sign of a
negative ``scale`` (recorded and reported, not refused) and where :math:`\tau` came from.  A
``torch.compile`` d model is run eagerly for the duration of the ``with`` block
(``torch.compiler.set_stance("force_eager")``); a block in which no recognised layer ran is an
error, not an empty file.
"""

from hypviz.capture.family_readers import READERS, Reader, WrappedMethod, attended_keys, heads_first, register, wrap_method
from hypviz.capture.hooks import Capture, attention
from hypviz.capture.records import FORMAT, MODELS, MODES, VERSION, LayerRecord, load, modes, parse, save
from hypviz.capture.verification import verify

__all__ = ["attention", "Capture", "LayerRecord", "save", "load", "parse", "FORMAT", "VERSION", "MODES", "MODELS",
           "READERS", "Reader", "register", "modes", "verify", "heads_first", "attended_keys", "wrap_method", "WrappedMethod"]
