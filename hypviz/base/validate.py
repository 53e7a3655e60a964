"""The argument checks of hypviz, with one wording: ``"<name> must be <expected>, got <value>"``.

Private: the public functions of every module call these once, at their entry, and then compute
with unchecked internals.  Nothing here imports torch or numpy at module level (the CLI's ``--help`` stays
light); a check that needs torch imports it when called.

One rule for numbers, everywhere: a number is a Python ``int`` or ``float``, a numpy integer or float
(``np.int64``, ``np.float32``, ...) or a one-value real tensor; a string or bytes is refused even when it spells a
number (``"temperature must be a positive finite number ..., got the string '1.0'"``), and so are bools (where a
number is meant) and complex values.  An integer argument takes only integral types (never ``2.0``).

Examples
--------
>>> from hypviz.base import validate
>>> validate.positive(2, "temperature")
2.0
>>> validate.positive("1.0", "temperature")
Traceback (most recent call last):
    ...
ValueError: temperature must be a positive finite number, got the string '1.0'
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any, Literal, overload

__all__ = ["SEED_MAX", "FEATURES_MAX", "TEMPERATURE_MIN", "positive", "number", "temperature", "integer", "seed", "features",
           "choice", "float_dtype"]

#: The largest seed: ``torch.Generator.manual_seed`` takes ``0 .. 2**64 - 1``.
SEED_MAX = 2**64 - 1

#: The largest number D of random features (``"distance_rf"``), for the API and the CLI's ``--features`` alike:
#: 2**22 directions of d + 1 float64 coordinates (the operands' size is then checked against the memory budget).
FEATURES_MAX = 2**22

#: The smallest temperature: the smallest normal float64, 2**-1022 (about 2.2e-308).  Below it ``1 / temperature``
#: overflows float64 and ``0 / temperature`` is NaN, so no logit can be formed.
TEMPERATURE_MIN = sys.float_info.min


def _fail(name: str, expected: str, value: Any, hint: str = "", exc: type[Exception] = ValueError) -> Exception:
    return exc(f"{name} must be {expected}{hint}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """``repr(value)`` in at most about 80 characters (an int of 10^5 digits has no repr at all); a string or bytes
    is named as such (``the string '1.0'``), so that a number spelt in one is not mistaken for the number."""
    if isinstance(value, bool):
        return f"{value!r} (a bool)"
    if isinstance(value, str):
        return "the string " + _cut(repr(str(value)))
    if isinstance(value, (bytes, bytearray)):
        return "the bytes " + _cut(repr(bytes(value)))
    try:
        text = repr(value)
    except ValueError:  # int beyond sys.get_int_max_str_digits()
        return f"an integer of {value.bit_length()} bits"
    return _cut(text)


def _cut(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


def _not_a_number(value: Any) -> bool:
    """Whether ``value`` is refused wherever a number is meant, whatever ``float(value)`` would make of it: a string
    or bytes (``float("1.0")`` and ``float(b"1")`` work), a bool (Python's, numpy's or a bool tensor) or a complex
    value (numpy's ``float`` of one drops its imaginary part)."""
    if isinstance(value, (str, bytes, bytearray, memoryview, bool, complex)):
        return True
    dtype = getattr(value, "dtype", None)  # numpy scalars and arrays, torch tensors
    if dtype is None:
        return False
    text = str(dtype)
    return getattr(dtype, "kind", "") in ("b", "c", "U", "S", "O") or text == "torch.bool" or "complex" in text


def _real(value: Any, name: str, expected: str, hint: str) -> float:
    """``float(value)`` for a real number (:func:`_not_a_number` refused), else the one-line ``ValueError``."""
    _fixed(value, name)
    if _not_a_number(value):
        raise _fail(name, expected, value, hint)
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError, RuntimeError):  # OverflowError: an int beyond float's range;
        raise _fail(name, expected, value, hint) from None  # RuntimeError: a tensor of several values


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
    v = _real(value, name, "a positive finite number", hint)
    if not math.isfinite(v) or v <= 0.0:
        raise _fail(name, "a positive finite number", value, hint)
    return v


def number(value: Any, name: str, minimum: float | None = None, hint: str = "") -> float:
    """``value`` as a float, refused unless finite (and ``>= minimum`` when given; bools are refused)."""
    expected = "a finite number" if minimum is None else f"a finite number >= {minimum:g}"
    v = _real(value, name, expected, hint)
    if not math.isfinite(v) or (minimum is not None and v < minimum):
        raise _fail(name, expected, value, hint)
    return v


def temperature(value: Any, name: str = "temperature", hint: str = "") -> float:
    r"""``value`` as a temperature :math:`\tau`: a finite number from :data:`TEMPERATURE_MIN` (the smallest normal
    float64, about 2.2e-308) up.  A smaller positive one (subnormal) makes ``1 / temperature`` overflow float64: it is
    refused as the overflow it is, in the words of the logits' own check, with the range that works.

    Examples
    --------
    >>> from hypviz.base import validate
    >>> validate.temperature(1e-320)
    Traceback (most recent call last):
        ...
    ValueError: temperature 1e-320 makes the logits overflow float64 (1/temperature is beyond its range);
        the smallest usable is 2.23e-308 (the smallest normal float64), the largest 1.8e+308
    """
    v = positive(value, name, hint)
    if v < TEMPERATURE_MIN:
        raise ValueError(f"{name} {v!r} makes the logits overflow float64 (1/{name} is beyond its range); the smallest "
                         f"usable is {TEMPERATURE_MIN:.3g} (the smallest normal float64), the largest {sys.float_info.max:.3g}")
    return v


@overload
def integer(
    value: Any, name: str, minimum: int | None = None, hint: str = "", allow_none: Literal[False] = False,
    maximum: int | None = None,
) -> int: ...
@overload
def integer(
    value: Any, name: str, minimum: int | None = None, hint: str = "", allow_none: bool = False, maximum: int | None = None
) -> int | None: ...
def integer(
    value: Any, name: str, minimum: int | None = None, hint: str = "", allow_none: bool = False, maximum: int | None = None
) -> int | None:
    """``value`` as an int (``int`` or a numpy integer, never a bool), refused outside ``[minimum, maximum]``; ``None``
    passes if allowed."""
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
