"""The API refuses tensors without dense data with the documented exception type: a meta tensor (a shape
without values), sparse (COO, CSR) and nested tensors passed to ``attention_map`` or ``compare`` are a
one-line ``TypeError``, never a ``RuntimeError`` from deep inside torch."""

from __future__ import annotations

import pytest
import torch

from hypviz import attention

from hypviz import data


def _bad(kind: str, x: torch.Tensor) -> torch.Tensor:
    if kind == "meta":
        return x.to("meta")
    if kind == "sparse":
        return x.to_sparse()
    if kind == "sparse_csr":
        return x[0].to_sparse_csr()
    return torch.nested.nested_tensor([x[0], x[1][:3]])


@pytest.mark.parametrize("role", ["queries", "keys"])
@pytest.mark.parametrize("kind", ["meta", "sparse", "sparse_csr", "nested"])
@pytest.mark.parametrize("call", ["attention_map", "compare", "focused"])
def test_tensors_without_dense_data_are_a_type_error(call, kind, role, recwarn):
    q = data.lifted_gaussian((2, 5), 3, 1.0, seed=1)
    bad = _bad(kind, q)
    args = (bad, q) if role == "queries" else (q, bad)
    with pytest.raises(TypeError, match=rf"^{role}: expected a dense tensor of coordinates, got a (meta|sparse|nested) tensor"):
        if call == "compare":
            attention.compare(*args, device="cpu")
        else:
            attention.attention_map(*args, "spatial" if call == "attention_map" else "focused")
