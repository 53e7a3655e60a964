"""A small stand-in for a Hypformer-style attention layer, written for the tests from the maths alone.

It has the *structure* :mod:`hypviz.capture` recognises (per-head ``Wq``/``Wk``/``Wv`` module
lists, ``attention_type``, ``power_k``, ``norm_scale``, ``scale``, ``bias``, ``manifold.k``) and
computes, with heads stacked as ``(N, H, d + 1)``:

* ``"linear_focused"``: ``phi(x) = fp((relu(x) + 1e-6) / (|norm_scale| + 1e-6), p)``,
  ``fp(x, p) = (|x| / |x^p|) x^p`` on spatial parts, per head
  ``phi(Q) (phi(K)^T V_s) / (phi(Q) sum_j phi(kappa_j) + 1e-6)``, the mean over heads, lifted
  with ``x_t = sqrt(|x_s|^2 + k)`` (no additive value map);
* ``"full"``: ``A = softmax((2 + 2 cinner(q, kappa)) / scale + bias)`` per head (kept in
  ``last_attention``, ``(H, N, M)``), the weighted means ``A V`` renormalised onto the
  hyperboloid, then their mean over heads renormalised again.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Manifold:
    """Holds the curvature parameter ``k`` (``<x, x>_L = -k``), as a tensor like Hypformer's.

    ``cinner(x, y)`` is the pairwise Lorentzian inner product ``<x, y>_L``, divided by ``k`` when
    ``divide_by_k`` (as in Hypformer's ``large/`` and ``medium/`` trees; its simplified tree does not).
    """

    def __init__(self, k: float, divide_by_k: bool = True):
        self.k = torch.tensor(float(k))
        self.divide_by_k = divide_by_k

    def cinner(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        inner = -x[..., :1] @ y[..., :1].transpose(-1, -2) + x[..., 1:] @ y[..., 1:].transpose(-1, -2)
        return inner / self.k if self.divide_by_k else inner


class HypLinearLike(nn.Module):
    """``(N, d_in)`` features -> ``(N, d + 1)`` points: ``x_s = W x + b``, ``x_t = sqrt(|x_s|^2 + k)``.

    ``lift_k`` (default: the manifold's ``k``) lets a test build points of the wrong curvature.
    """

    def __init__(self, manifold: Manifold, d_in: int, d: int, lift_k: float | None = None):
        super().__init__()
        self.manifold = manifold
        self.linear = nn.Linear(d_in, d)
        self.lift_k = lift_k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xs = self.linear(x)
        k = float(self.manifold.k) if self.lift_k is None else self.lift_k
        return torch.cat([torch.sqrt((xs * xs).sum(dim=-1, keepdim=True) + k), xs], dim=-1)


def lorentz_renorm(m: torch.Tensor, k: float) -> torch.Tensor:
    """``sqrt(k) m / sqrt(|<m, m>_L|)``: a time-like vector scaled onto ``<x, x>_L = -k``."""
    sq = -m[..., :1] ** 2 + (m[..., 1:] ** 2).sum(dim=-1, keepdim=True)
    return math.sqrt(k) * m / sq.abs().clamp_min(1e-12).sqrt()


class StandInAttention(nn.Module):
    """Hypformer-like attention layer: ``forward(query_input, source_input) -> (N, d_v + 1)`` points."""

    def __init__(
        self,
        d_in: int,
        d: int,
        heads: int,
        k: float = 1.0,
        attention_type: str = "linear_focused",
        *,
        power_k: float = 2.0,
        use_weight: bool = True,
        norm_scale: float = 0.7,
        scale_factor: float = 1.0,
        bias: float = 0.0,
        lift_k: float | None = None,
        cinner_divides_by_k: bool = True,
    ):
        super().__init__()
        self.manifold = Manifold(k, cinner_divides_by_k)
        self.attention_type = attention_type
        self.power_k = power_k
        self.use_weight = use_weight
        self.num_heads = heads
        self.Wq = nn.ModuleList(HypLinearLike(self.manifold, d_in, d, lift_k) for _ in range(heads))
        self.Wk = nn.ModuleList(HypLinearLike(self.manifold, d_in, d, lift_k) for _ in range(heads))
        if use_weight:
            self.Wv = nn.ModuleList(HypLinearLike(self.manifold, d_in, d, lift_k) for _ in range(heads))
        self.scale = nn.Parameter(torch.tensor([math.sqrt(d) * scale_factor]))
        self.bias = nn.Parameter(torch.tensor(float(bias)))
        self.norm_scale = nn.Parameter(torch.tensor(float(norm_scale)))
        self.last_attention: torch.Tensor | None = None

    # ---- the two attentions, on (N, H, d + 1) stacks ----
    def _phi(self, xs: torch.Tensor) -> torch.Tensor:
        y = (torch.relu(xs) + 1e-6) / (self.norm_scale.abs() + 1e-6)
        yp = y**self.power_k
        return y.norm(dim=-1, keepdim=True) / yp.norm(dim=-1, keepdim=True) * yp

    def focused(self, q: torch.Tensor, kk: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k = float(self.manifold.k)
        fq, fk, vs = self._phi(q[..., 1:]), self._phi(kk[..., 1:]), v[..., 1:]
        kv = torch.einsum("nhm,nhd->hmd", fk, vs)
        numerator = torch.einsum("nhm,hmd->nhd", fq, kv)
        denominator = torch.einsum("nhm,hm->nh", fq, fk.sum(dim=0)).unsqueeze(-1)
        out = (numerator / (denominator + 1e-6)).mean(dim=1)  # (N, d_v)
        return torch.cat([torch.sqrt((out * out).sum(dim=-1, keepdim=True) + k), out], dim=-1)

    def full(self, q: torch.Tensor, kk: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k = float(self.manifold.k)
        qh, kh, vh = q.transpose(0, 1), kk.transpose(0, 1), v.transpose(0, 1)  # (H, ., d + 1)
        logits = (2.0 + 2.0 * self.manifold.cinner(qh, kh)) / self.scale + self.bias
        att = torch.softmax(logits, dim=-1)  # (H, N, M)
        self.last_attention = att.detach().clone()
        per_head = lorentz_renorm(att @ vh, k)  # (H, N, d_v + 1)
        return lorentz_renorm(per_head.mean(dim=0), k)

    def forward(self, query_input: torch.Tensor, source_input: torch.Tensor) -> torch.Tensor:
        q = torch.stack([w(query_input) for w in self.Wq], dim=1)  # (N, H, d + 1)
        kk = torch.stack([w(source_input) for w in self.Wk], dim=1)
        if self.use_weight:
            v = torch.stack([w(source_input) for w in self.Wv], dim=1)
        else:
            v = torch.stack([source_input] * self.num_heads, dim=1)
        if self.attention_type == "linear_focused":
            return self.focused(q, kk, v)
        if self.attention_type == "full":
            return self.full(q, kk, v)
        raise ValueError(f"unknown attention_type {self.attention_type!r}")


class Encoder(nn.Module):
    """A stack of stand-in layers, each ``x -> layer(x, x)``; ``blocks.0``, ``blocks.1``, ..."""

    def __init__(self, layers: list[StandInAttention]):
        super().__init__()
        self.blocks = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, x)
        return x


def lifted_input(n: int, d: int, k: float = 1.0, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(n, d + 1)`` points on ``<x, x>_L = -k`` (lifted Gaussian spatial parts), a layer's input."""
    g = torch.Generator().manual_seed(seed)
    xs = 0.8 * torch.randn(n, d, generator=g, dtype=dtype)
    return torch.cat([torch.sqrt((xs * xs).sum(dim=-1, keepdim=True) + k), xs], dim=-1)
