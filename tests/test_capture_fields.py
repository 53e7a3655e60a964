"""Capture records' number fields by type, and a model called from several threads during a capture.

* A string, a tensor or a complex number in a record's number field (``k``, ``temperature``, ``power``,
  ``norm_scale``, ``bias``, ``scale_sign``, ``verify_error``, ...) is a one-line ``TypeError`` naming the field
  for a caller building a record, and a one-line ``ValueError`` naming the file and record from
  :func:`hypviz.capture.records.parse` (never torch's ``RuntimeError``).
* Four threads inside one layer at once (held together by a barrier inside the layer, so that their calls
  interleave on every run): each call is recorded whole, numbered 0..3, and verified.
"""

from __future__ import annotations

import threading

import pytest
import torch

from hypviz import capture
from hypviz.capture import records
from hypviz.lorentz import lift

from _standin import Encoder, StandInAttention, lifted_input

F64 = torch.float64


def _fields(**extra):
    q = lift(torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(0), dtype=F64), k=1.0)
    return dict(name="l0", queries=q, keys=q, values=None, k=1.0, mode="full", kind="distance", temperature=2.0) | extra


@pytest.mark.parametrize("field, value, shown", [
    ("temperature", "2", "str '2'"),
    ("temperature", torch.tensor(2.0), "a tensor of shape ()"),
    ("k", "1", "str '1'"),
    ("k", torch.tensor([1.0]), "a tensor of shape (1,)"),
    ("power", b"2", "bytes b'2'"),
    ("bias", 1j, "complex 1j"),
    ("verify_error", torch.ones(3), "a tensor of shape (3,)"),
    ("scale_sign", torch.tensor([1, 1]), "a tensor of shape (2,)"),
    ("scale_sign", torch.tensor(1), "a tensor of shape ()"),
    ("scale_sign", "-1", "str '-1'"),
    ("scale_sign", 1.0, "float 1.0"),
])
def test_a_number_field_of_the_wrong_type_is_one_line_naming_it(field, value, shown):
    with pytest.raises(TypeError) as err:
        records.LayerRecord(**_fields(**{field: value}))
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"LayerRecord 'l0': {field} must be ") and text.endswith(f"got {shown}")
    d = _fields(**{field: value})
    with pytest.raises(ValueError) as err:  # from a file: the file and the record named first
        records.parse({"format": records.FORMAT, "version": records.VERSION, "layers": [d]}, "cap.pt")
    assert "\n" not in str(err.value) and str(err.value).startswith(f"cap.pt: record 0: LayerRecord 'l0': {field} must be ")


def test_numpy_and_python_numbers_are_accepted():
    import numpy as np

    rec = records.LayerRecord(**_fields(temperature=np.float32(2.0), k=np.int64(1), scale_sign=np.int8(-1), bias=3))
    assert (rec.temperature, rec.k, rec.scale_sign, rec.bias) == (2.0, 1.0, -1, 3.0)
    assert type(rec.scale_sign) is int and type(rec.temperature) is float


@pytest.mark.parametrize("mode", ["linear_focused", "full"])
def test_a_model_called_from_four_threads_records_each_call_whole(mode):
    torch.manual_seed(0)
    model = Encoder([StandInAttention(5, 4, 2, 1.0, mode)]).to(F64)
    barrier = threading.Barrier(4, timeout=30)
    # every thread waits inside the layer, between its first and its second head: the four calls interleave

    def meet(module, args):
        barrier.wait()

    model.blocks[0].Wq[1].register_forward_pre_hook(meet)
    xs = [lifted_input(6, 4, seed=s, dtype=F64) for s in range(4)]
    outs: dict[int, torch.Tensor] = {}
    with capture.attention(model) as cap:
        threads = [threading.Thread(target=lambda i=i: outs.__setitem__(i, model(xs[i]))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(outs) == 4 and len(cap.layers) == 4
    assert sorted(r.call for r in cap.layers) == [0, 1, 2, 3]
    assert all(str(r.verify_note).startswith("verified") for r in cap.layers), [r.verify_note for r in cap.layers]
    # each record holds one thread's call: its queries are the layer's own of exactly one of the inputs
    with torch.no_grad():
        own = [model.blocks[0].Wq[0](x) for x in xs]
    matches = [[i for i, o in enumerate(own) if torch.allclose(r.queries[0], o.to(r.queries.dtype))] for r in cap.layers]
    assert sorted(matches) == [[0], [1], [2], [3]], matches
