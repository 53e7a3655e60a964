r"""A small hyperbolic transformer with Hypformer's *structure*, written from the maths (no Hypformer code).

Points are :math:`x = (x_t, x_s)` on :math:`\langle x, x\rangle_L = -k`, time first, and

.. math::

    \mathrm{lift}(x_s) = \Bigl(\sqrt{\|x_s\|^2 + k},\; x_s\Bigr).

:class:`HypAttention` has what :func:`hypviz.capture.attention` recognises without arguments
(per-head ``Wq``/``Wk``/``Wv`` module lists, ``attention_type``, ``power_k``, ``norm_scale``,
``scale``, ``bias``, ``manifold.k``, ``manifold.cinner``), so a trained :class:`ToyHypformer` can
be captured and reported on::

    model = ToyHypformer(34, 4, 2, heads=3, k=2.0, attention_type="full")   # float64, parameters from seed 0
    losses = train(model, x, y, steps=30, lr=0.01, seed=0)                  # x (34, 34) features, y (34,) labels
    with hypviz.capture.attention(model) as cap:
        model(x)
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["Manifold", "HypLinear", "HypAttention", "ToyHypformer", "lift", "centroid", "train"]
EPS = 1e-6  # Hypformer's offset in the feature map and its normaliser


def lift(xs: torch.Tensor, *, k: float) -> torch.Tensor:
    r"""Prepend the time coordinate: ``(..., d) -> (..., d + 1)``.

    .. math::

        x = \Bigl(\sqrt{\|x_s\|^2 + k},\; x_s\Bigr)
    """
    return torch.cat([torch.sqrt((xs * xs).sum(dim=-1, keepdim=True) + k), xs], dim=-1)


def centroid(a: torch.Tensor, *, k: float) -> torch.Tensor:
    r"""Lorentzian centroid of a weighted sum ``a (..., d + 1)`` of points: ``a`` rescaled onto the hyperboloid.

    .. math::

        c = \frac{\sqrt{k}\,a}{\sqrt{|\langle a, a\rangle_L|}}, \qquad \langle c, c\rangle_L = -k
        \text{ for time-like } a
    """
    aa = -a[..., :1] ** 2 + (a[..., 1:] ** 2).sum(dim=-1, keepdim=True)
    return math.sqrt(k) * a / aa.abs().sqrt()


class Manifold:
    r"""The hyperboloid :math:`\langle x, x\rangle_L = -k` (``k`` fixed, not learned, as in Hypformer's public code).

    ``cinner(x (..., N, d + 1), y (..., M, d + 1)) -> (..., N, M)``:

    .. math::

        \mathrm{cinner}(x, y)_{ij} = \frac{\langle x_i, y_j\rangle_L}{k}
    """

    def __init__(self, *, k: float):
        self.k = float(k)

    def cinner(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        r"""All inner products over :math:`k`, :math:`\langle x_i, y_j\rangle_L / k`, shape ``(..., N, M)``."""
        inner = x[..., 1:] @ y[..., 1:].transpose(-1, -2) - x[..., :1] @ y[..., :1].transpose(-1, -2)
        return inner / self.k


class HypLinear(nn.Module):
    r"""HypLinear-like map of points ``(N, d_in + 1) -> (N, d + 1)`` (Hypformer's applies ``W`` to all of ``x``).

    .. math::

        y = \mathrm{lift}(W x_s + b)

    Only the spatial part :math:`x_s` enters.
    """

    def __init__(self, d_in: int, d: int, *, k: float):
        super().__init__()
        self.linear, self.k = nn.Linear(d_in, d), float(k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r"""Map points ``(..., d_in + 1)`` to points ``(..., d + 1)``: :math:`\mathrm{lift}(W x_s + b)`."""
        return lift(self.linear(x[..., 1:]), k=self.k)


class HypAttention(nn.Module):
    r"""Hypformer-style attention: ``forward(query_input (N, d_in + 1), source_input=None) -> (N, d + 1)``.

    Per head :math:`h`: :math:`q = W_q[h](x)`, :math:`\kappa = W_k[h](\mathrm{src})`,
    :math:`v = W_v[h](\mathrm{src})`, points on :math:`\langle x, x\rangle_L = -k` (``src`` is
    ``source_input``, default ``query_input``).

    * ``"linear_focused"``: with the feature map (:meth:`phi`, :math:`p` = ``power_k``)

      .. math::

          \varphi(x) = f_p\Bigl(\frac{\mathrm{relu}(x_s) + 10^{-6}}{|\mathrm{norm\_scale}| + 10^{-6}}\Bigr),
          \qquad f_p(y) = \frac{\|y\|}{\|y^p\|}\,y^p,

      each head computes

      .. math::

          o_h = \frac{\varphi(Q)\,(\varphi(K)^\top V_s)}{\varphi(Q)\sum_j \varphi(\kappa_j) + 10^{-6}}
                + \mathrm{v\_map\_mlp}(V_s)

      (no softmax, no :math:`1/\sqrt{d}`; row :math:`i` of :math:`\mathrm{v\_map\_mlp}(V_s)` is node
      :math:`i`'s own value, so :math:`N = M`, self-attention, as in Hypformer), and the output is
      :math:`\mathrm{lift}(\operatorname{mean}_h o_h)`.
    * ``"full"``: per head

      .. math::

          A = \mathrm{softmax}\Bigl(\frac{2 + 2\,\mathrm{cinner}(q, \kappa)}{\mathrm{scale}} + \mathrm{bias}\Bigr)
            = \mathrm{softmax}\Bigl(\frac{-\tfrac12\|q - \kappa\|_L^2}{\tau}\Bigr),
          \qquad \tau = \frac{k\,\mathrm{scale}}{2}

      (identity 1), the distance softmax; the per-head output is the :func:`centroid` of
      :math:`a = A V` (full points), the layer's output the centroid of the heads' mean.

    Parameters: ``norm_scale`` (init 1), ``scale`` (init :math:`\sqrt{d}`), ``bias`` (init 0),
    ``v_map_mlp`` (``nn.Linear(d, d)``, used by the focused mode only); ``power_k`` and
    ``manifold.k`` are fixed.  An ``attention_type`` other than these two raises ``ValueError``, and
    so does ``"linear_focused"`` with :math:`N \ne M`.
    """

    def __init__(self, d_in: int, d: int, heads: int, *, k: float = 1.0, attention_type: str = "linear_focused",
                 power_k: float = 2.0):
        super().__init__()
        if attention_type not in ("linear_focused", "full"):
            raise ValueError(f"attention_type must be 'linear_focused' or 'full', got {attention_type!r}")
        self.manifold, self.attention_type, self.power_k, self.d = Manifold(k=k), attention_type, float(power_k), d
        self.Wq, self.Wk, self.Wv = (nn.ModuleList(HypLinear(d_in, d, k=k) for _ in range(heads)) for _ in range(3))
        self.v_map_mlp = nn.Linear(d, d)
        self.norm_scale = nn.Parameter(torch.ones(()))
        self.scale = nn.Parameter(torch.tensor([math.sqrt(d)]))
        self.bias = nn.Parameter(torch.zeros(()))

    def reset_parameters(self) -> None:
        """Re-draw every ``nn.Linear`` (global RNG); ``norm_scale``, ``scale``, ``bias`` back to 1, ``sqrt(d)``, 0."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()
        with torch.no_grad():
            self.norm_scale.fill_(1.0)
            self.scale.fill_(math.sqrt(self.d))
            self.bias.zero_()

    def phi(self, xs: torch.Tensor) -> torch.Tensor:
        r"""The focused feature map on spatial parts ``(..., d)``.

        .. math::

            \varphi(x_s) = \frac{\|y\|}{\|y^p\|}\,y^p, \qquad
            y = \frac{\mathrm{relu}(x_s) + 10^{-6}}{|\mathrm{norm\_scale}| + 10^{-6}}, \quad p = \mathrm{power\_k}
        """
        y = (torch.relu(xs) + EPS) / (self.norm_scale.abs() + EPS)
        yp = y**self.power_k
        return y.norm(dim=-1, keepdim=True) / yp.norm(dim=-1, keepdim=True) * yp

    def forward(self, query_input: torch.Tensor, source_input: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output points ``(N, d + 1)`` for ``query_input`` and ``source_input`` (default: ``query_input``).

        The computation of ``attention_type`` is in the class docstring.
        """
        src = query_input if source_input is None else source_input
        q = torch.stack([w(query_input) for w in self.Wq])  # (H, N, d + 1)
        kk, v = torch.stack([w(src) for w in self.Wk]), torch.stack([w(src) for w in self.Wv])  # (H, M, d + 1)
        k = self.manifold.k
        if self.attention_type == "linear_focused":
            if q.shape[1] != kk.shape[1]:
                raise ValueError(f"linear_focused adds v_map_mlp(v_i) to query i: needs N = M, got "
                                 f"{q.shape[1]} != {kk.shape[1]}")
            fq, fk, vs = self.phi(q[..., 1:]), self.phi(kk[..., 1:]), v[..., 1:]
            num = fq @ (fk.transpose(-1, -2) @ vs)  # (H, N, d): right to left, no N x M array
            den = fq @ fk.sum(dim=-2).unsqueeze(-1)  # (H, N, 1)
            return lift((num / (den + EPS) + self.v_map_mlp(vs)).mean(dim=0), k=k)
        att = torch.softmax((2.0 + 2.0 * self.manifold.cinner(q, kk)) / self.scale + self.bias, dim=-1)  # (H, N, M)
        return centroid(centroid(att @ v, k=k).mean(dim=0), k=k)


class ToyHypformer(nn.Module):
    r"""Node classifier: features ``x (N, f)`` -> points -> attention layers -> ``(N, classes)`` logits.

    .. math::

        h_0 = \mathrm{lift}(W x + b), \qquad h_{i+1} = \mathrm{block}_i(h_i, h_i), \qquad
        \mathrm{logits} = \mathrm{readout}(h_{L,s}),

    the readout being ``nn.Linear(d, classes)`` of the last points' spatial parts.

    Parameters
    ----------
    features, d, classes : int
        Feature count ``f``, spatial dimension ``d`` of every point, number of classes.
    heads, k, attention_type, power_k
        Of every :class:`HypAttention` layer ``blocks[i]``, ``(N, d + 1) -> (N, d + 1)``.
    layers : int
        Number of attention layers.
    dropout : float
        Dropout on the spatial parts between the layers, :math:`h \leftarrow \mathrm{lift}(\mathrm{drop}(h_s))`,
        active in train mode only (default 0: none).
    seed : int
        The seed of :meth:`reset_parameters` (parameters are float64).
    """

    def __init__(self, features: int, d: int, classes: int, *, heads: int = 2, k: float = 1.0,
                 attention_type: str = "linear_focused", layers: int = 1, power_k: float = 2.0, seed: int = 0,
                 dropout: float = 0.0):
        super().__init__()
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")
        self.k = float(k)
        self.drop = nn.Dropout(float(dropout))
        with torch.random.fork_rng(devices=[]):  # construction draws are replaced by reset_parameters(seed)
            self.embed = nn.Linear(features, d)
            self.blocks = nn.ModuleList(HypAttention(d, d, heads, k=k, attention_type=attention_type, power_k=power_k)
                                        for _ in range(layers))
            self.readout = nn.Linear(d, classes)
        self.reset_parameters(seed)

    def reset_parameters(self, seed: int = 0) -> None:
        """Draw every parameter, in float64, from ``seed`` (the global RNG state is left as it was)."""
        self.double()  # first: the draws depend on the dtype they are drawn in
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for m in (self.embed, *self.blocks, self.readout):
                m.reset_parameters()

    def points(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output points ``(N, d + 1)``."""
        h = lift(self.embed(x), k=self.k)
        for block in self.blocks:
            if self.drop.p > 0:
                h = lift(self.drop(h[..., 1:]), k=self.k)
            h = block(h, h)
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The class logits ``(N, classes)``: the readout of the last points' spatial parts."""
        return self.readout(self.points(x)[..., 1:])


def train(model: ToyHypformer, x: torch.Tensor, y: torch.Tensor, steps: int = 100, lr: float = 0.05,
          seed: int | None = 0) -> list[float]:
    r"""Full-batch Adam on the cross-entropy, in float64.

    .. math::

        \mathcal{L} = -\frac{1}{N}\sum_i \log \mathrm{softmax}\bigl(\mathrm{model}(x)\bigr)_{i, y_i}

    Parameters
    ----------
    model : ToyHypformer
    x, y : torch.Tensor
        ``(N, f)`` features and ``(N,)`` integer labels.
    steps, lr : int, float
        Adam steps and learning rate.
    seed : int or None
        Unless None, the parameters are first re-drawn by ``model.reset_parameters(seed)``: the result
        then depends only on the architecture, the data, ``steps``, ``lr`` and ``seed``.

    Returns
    -------
    list of float
        The loss before each of the ``steps`` updates and after the last one (``steps + 1`` values).
    """
    if seed is not None:
        model.reset_parameters(seed)
    model.double().train()
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.int64)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        history.append(float(loss.detach()))
    with torch.no_grad():
        history.append(float(nn.functional.cross_entropy(model(x), y)))
    return history
