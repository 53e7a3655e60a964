"""The argument checks of hypviz, with one wording: ``"<name> must be <expected>, got <value>"``.

Private: the public functions of every module call these once, at their entry, and then compute
with unchecked internals.  Nothing here imports torch at module level (the CLI's ``--help`` stays
light); a check that needs torch imports it when called.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["SEED_MAX", "FEATURES_MAX", "positive", "number", "integer", "seed", "features", "choice", "float_dtype"]

#: The largest seed: ``torch.Generator.manual_seed`` takes ``0 .. 2**64 - 1``.
SEED_MAX = 2**64 - 1

#: The largest number D of random features (``"distance_rf"``), for the API and the CLI's ``--features`` alike:
#: 2**22 directions of d + 1 float64 coordinates (the operands' size is then checked against the memory budget).
FEATURES_MAX = 2**22


def _fail(name: str, expected: str, value: Any, hint: str = "", exc: type[Exception] = ValueError) -> Exception:
    return exc(f"{name} must be {expected}{hint}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """``repr(value)`` in at most about 80 characters (an int of 10^5 digits has no repr at all)."""
    if isinstance(value, bool):
        return f"{value!r} (a bool)"
    try:
        text = repr(value)
    except ValueError:  # int beyond sys.get_int_max_str_digits()
        return f"an integer of {value.bit_length()} bits"
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


def _fixed(value: Any, name: str) -> None:
    """Refuse a tensor that requires grad, as the curvature parameter ``k`` is refused: hypviz's scalar parameters
    are fixed numbers, and ``float()`` would detach it silently (no gradient would flow to it); a tensor with no
    value (meta) or more than one value is refused too."""
    if getattr(value, "requires_grad", False) is True:
        raise ValueError(
            f"{name} is a tensor that requires grad; hypviz treats {name} as a fixed number (no gradient flows to it): "
            f"pass float({name}) or {name}.detach()"
        )
    if getattr(value, "is_meta", False) is True:
        raise ValueError(f"{name} must be a number, got a meta tensor (a shape without a value)")


def positive(value: Any, name: str, hint: str = "") -> float:
    """``value`` as a float, refused unless a finite number :math:`> 0` (bools are refused too, and tensors that
    require grad: see :func:`_fixed`)."""
    _fixed(value, name)
    if isinstance(value, bool):
        raise _fail(name, "a positive finite number", value, hint)
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float's range
        raise _fail(name, "a positive finite number", value, hint) from None
    if not math.isfinite(v) or v <= 0.0:
        raise _fail(name, "a positive finite number", value, hint)
    return v


def number(value: Any, name: str, minimum: float | None = None, hint: str = "") -> float:
    """``value`` as a float, refused unless finite (and ``>= minimum`` when given; bools are refused)."""
    expected = "a finite number" if minimum is None else f"a finite number >= {minimum:g}"
    _fixed(value, name)
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float's range
        raise _fail(name, expected, value, hint) from None
    if isinstance(value, bool) or not math.isfinite(v) or (minimum is not None and v < minimum):
        raise _fail(name, expected, value, hint)
    return v


def integer(
    value: Any, name: str, minimum: int | None = None, hint: str = "", allow_none: bool = False, maximum: int | None = None
) -> int | None:
    """``value`` as an int (any integral type, never a bool), refused outside ``[minimum, maximum]``; ``None`` passes if allowed."""
    if value is None and allow_none:
        return None
    if minimum is not None and maximum is not None:
        expected = f"an integer from {minimum} to {maximum}"
    elif minimum == 1:
        expected = "a positive integer"
    elif minimum is None:
        expected = "an integer"
    else:
        expected = f"an integer >= {minimum}"
    if allow_none:
        expected += " or None"
    bad = isinstance(value, bool) or not isinstance(value, numbers.Integral)
    if bad or (minimum is not None and int(value) < minimum) or (maximum is not None and int(value) > maximum):
        raise _fail(name, expected, value, hint)
    return int(value)


def seed(value: Any, name: str = "seed") -> int:
    """``value`` as a seed of ``torch.Generator.manual_seed``: an integer from 0 to :data:`SEED_MAX` = 2**64 - 1."""
    return integer(value, name, 0, " = 2**64 - 1", maximum=SEED_MAX)


def features(value: Any, name: str = "features") -> int:
    """``value`` as a number of random features: an integer from 1 to :data:`FEATURES_MAX` = 2**22."""
    return integer(value, name, 1, f" = 2**{FEATURES_MAX.bit_length() - 1} (the number D of random features)",
                   maximum=FEATURES_MAX)


def choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise _fail(name, "one of " + ", ".join(repr(a) for a in allowed), value)
    return value


def float_dtype(dtype: Any, name: str = "dtype") -> Any:
    """``dtype`` if it is ``torch.float32`` or ``torch.float64`` (a ``TypeError`` otherwise)."""
    import torch

    if dtype not in (torch.float32, torch.float64):
        raise _fail(name, "torch.float32 or torch.float64", dtype, exc=TypeError)
    return dtype
