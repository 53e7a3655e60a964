"""The API refuses tensors without dense data with the documented exception type: a meta tensor (a shape
without values), sparse (COO, CSR) and nested tensors passed to ``attention_map`` or ``compare`` are a
one-line ``TypeError``, never a ``RuntimeError`` from deep inside torch; so are numpy arrays that hold no float32 or
float64 numbers (long double, strings, bytes, dates, records), named with their dtype; big-endian floats are read as
their values."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from hypviz import attention, data


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


# --------------------------------------------------------------------------- #
# numpy dtypes that hold no float32/float64 numbers: one line naming the argument and the accepted dtypes
# --------------------------------------------------------------------------- #
def _points() -> np.ndarray:
    return data.lifted_gaussian((6,), 3, 1.0, seed=2).numpy()


NOT_FLOATS = {
    "longdouble": (lambda q: q.astype(np.longdouble), r"float128|float96|longdouble", r"long double.*astype\(numpy.float64\)"),
    "str": (lambda q: q.astype(str), r"<U\d+", r"strings"),
    "bytes": (lambda q: q.astype("S12"), r"\|S12", r"bytes"),
    "datetime": (lambda q: np.zeros(q.shape, "datetime64[s]"), r"datetime64\[s\]", r"dates and times"),
    "timedelta": (lambda q: np.zeros(q.shape, "timedelta64[ms]"), r"timedelta64\[ms\]", r"time differences"),
    "void": (lambda q: np.zeros(q.shape, "V8"), r"\|V8", r"raw bytes or records"),
    "record": (lambda q: np.zeros(q.shape[:1], dtype=[("t", "f8"), ("x", "f8")]), r"\[\('t', '<f8'\)", r"records"),
}


@pytest.mark.parametrize("role", ["queries", "keys"])
@pytest.mark.parametrize("case", list(NOT_FLOATS))
@pytest.mark.parametrize("call", ["attention_map", "compare"])
def test_numpy_arrays_of_no_float_are_one_line_naming_the_argument(call, case, role):
    if case == "longdouble" and np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("long double is float64 on this platform")
    make, dtype, what = NOT_FLOATS[case]
    q = _points()
    bad = make(q)
    args = (bad, q) if role == "queries" else (q, bad)
    with pytest.raises(TypeError) as e:
        if call == "compare":
            attention.compare(*args, device="cpu")
        else:
            attention.attention_map(*args, "spatial")
    text = str(e.value)
    assert "\n" not in text and len(text) < 300
    assert re.match(rf"^{role}: expected a floating-point array \(float32 or float64\), got dtype {dtype}", text), text
    assert re.search(what, text), text


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">f2"])
def test_big_endian_floats_are_read_as_their_values(dtype):
    from hypviz.lorentz import as_tensor

    q = _points().astype(dtype)
    t = as_tensor(q, "queries")
    native = np.dtype(dtype).newbyteorder("=")
    assert t.dtype == torch.from_numpy(q.astype(native)).dtype
    assert np.array_equal(t.numpy(), q.astype(native))
    if dtype != ">f2":
        a = attention.attention_map(q, q, "distance")
        b = attention.attention_map(q.astype(native), q.astype(native), "distance")
        assert torch.equal(a, b)


@pytest.mark.parametrize("value, shown", [(10**400, r"1000000000.*\.\.\. \(401 characters\)"),
                                          (10**5000, r"an integer of 16610 bits")], ids=["1e400", "1e5000"])
@pytest.mark.parametrize("argument", ["temperature", "k"])
def test_an_int_beyond_floats_range_is_one_line_naming_the_argument(argument, value, shown):
    q = data.lifted_gaussian((4,), 2, 1.0, seed=1)
    with pytest.raises(ValueError, match=rf"^{argument} must be a positive finite number.*, got {shown}$") as e:
        attention.attention_map(q, q, "spatial", **{argument: value})
    assert len(str(e.value)) < 300
