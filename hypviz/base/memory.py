"""Measuring memory honestly: the bytes of the tensors an operation allocates."""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["peak_tensor_memory"]

def peak_tensor_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Run ``fn(*args, **kwargs)`` and return ``(result, peak)``: the peak tensor memory it allocated, in bytes.

    Every aten operation run by ``fn`` is observed (a ``TorchDispatchMode``); an output whose storage
    aliases none of the operation's inputs is a new allocation, counted with its ``nbytes`` until
    its storage is freed.  ``peak`` is the largest total of such storages alive at once.  The inputs,
    allocated before, do not count; scratch space inside a single kernel (e.g. BLAS packing
    buffers) is not visible.  Deterministic, unlike the resident set size, and cheap enough for
    a notebook.

    Examples
    --------
    >>> import torch
    >>> from hypviz.attention import peak_tensor_memory
    >>> out, peak = peak_tensor_memory(torch.zeros, 1000, dtype=torch.float64)
    >>> out.shape, peak >= 8000  # at least the 1000 float64 of the result
    (torch.Size([1000]), True)
    """
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    state = {"live": 0, "peak": 0}
    tracked: set[int] = set()

    def release(ptr: int, nbytes: int) -> None:
        state["live"] -= nbytes
        tracked.discard(ptr)

    def storage_ptrs(tree: Any) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)}

    class _Meter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            inputs = storage_ptrs((args, kwargs))
            out = func(*args, **kwargs)
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                st = t.untyped_storage()
                ptr, nbytes = st.data_ptr(), st.nbytes()
                if nbytes == 0 or ptr in inputs or ptr in tracked:
                    continue
                tracked.add(ptr)
                state["live"] += nbytes
                state["peak"] = max(state["peak"], state["live"])
                weakref.finalize(st, release, ptr, nbytes)
            return out

    with _Meter():  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode.__init__ has no annotations
        result = fn(*args, **kwargs)
    return result, state["peak"]
