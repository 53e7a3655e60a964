r"""The sharp bounds on how far two softmax rows can differ when their logits differ by a bias.

For two rows :math:`P = \operatorname{softmax}(s)` and :math:`S = \operatorname{softmax}(s + b)`
whose bias has spread :math:`\Delta = \max_j b_j - \min_j b_j`, the suprema over all rows of the
total variation and of :math:`\mathrm{KL}(P \| S)`; notebook 04 derives both.  For the spatial and
distance maps, :math:`\Delta = q_t (\max_j \kappa_t - \min_j \kappa_t) / \tau` (identity 4).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tv_supremum", "kl_supremum"]

ArrayLike = Any

def tv_supremum(delta: ArrayLike) -> torch.Tensor:
    r"""Sharp bound on the total variation of two softmax rows whose logits differ by a bias of spread :math:`\Delta`.

    For :math:`P_j \propto e^{s_j}` and :math:`S_j \propto e^{s_j + b_j}` with
    :math:`\max_j b_j - \min_j b_j \le \Delta`,

    .. math::

        \mathrm{TV}(P, S) = \tfrac12 \sum_j |P_j - S_j| \le \tanh\frac{\Delta}{4},

    with equality for a two-point row (notebook 04 derives it).  Returns a tensor of the dtype of
    a floating-point ``delta`` (torch's default dtype for a Python number or integers).

    Examples
    --------
    >>> from hypviz.attention import tv_supremum
    >>> [round(float(t), 4) for t in tv_supremum([0.0, 2.0])]  # tanh(Delta / 4)
    [0.0, 0.4621]
    """
    d = torch.as_tensor(delta)
    return torch.tanh(d / 4)


def kl_supremum(delta: ArrayLike) -> torch.Tensor:
    r"""Exact supremum of the KL divergence of two softmax rows whose logits differ by a bias of spread :math:`\Delta \ge 0`.

    For :math:`P` and :math:`S` as in :func:`tv_supremum` (the supremum is the same for
    :math:`\mathrm{KL}(P \| S)` and :math:`\mathrm{KL}(S \| P)`),

    .. math::

        \sup \mathrm{KL} = \max_{\theta \in [0, 1]} \bigl[\log(1 - \theta + \theta e^{\Delta}) - \theta \Delta\bigr]
            = \log\frac{e^{\Delta} - 1}{\Delta} - 1 + \frac{\Delta}{e^{\Delta} - 1}
            \le \frac{\Delta^2}{8},

    attained by a two-point row (by convexity of :math:`e^b`; notebook 04 derives it).
    :math:`\Delta^2/8` is Hoeffding's simpler bound; the supremum grows only like
    :math:`\Delta - 1 - \log\Delta` for large :math:`\Delta` (4.92 at 8, 16.0 at 20).  Evaluated in
    float64 without cancellation (a series below :math:`\Delta = 0.05`; negative values count as 0)
    and returned in the dtype of ``delta`` (torch's default dtype for a Python float, float64 for
    integers).

    Examples
    --------
    >>> from hypviz.attention import kl_supremum, tv_supremum
    >>> [round(float(t), 4) for t in kl_supremum([0.0, 2.0])]
    [0.0, 0.4745]
    """
    d0 = torch.as_tensor(delta)
    d = d0.double().clamp_min(0.0)
    small = d < 0.05
    d2 = d * d
    series = d2 / 8 - d2**2 / 576 + d2**3 / 25920 - d2**4 / 1075200
    safe = torch.where(small, torch.ones_like(d), d)
    big = safe + torch.log1p(-torch.exp(-safe)) - torch.log(safe) - 1 + safe * torch.exp(-safe) / (-torch.expm1(-safe))
    out = torch.where(small, series, big)
    return out.to(d0.dtype) if d0.is_floating_point() else out

