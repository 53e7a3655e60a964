r"""The ``hypviz`` command's one-line errors, and names shown safely in them.

Private to the command's modules (:mod:`hypviz.cli`, :mod:`hypviz.reports.inputs`,
:mod:`hypviz.reports.input_files`, :mod:`hypviz.reports.publishing`): :class:`UsageError` is bad input or usage,
reported as one line with exit code 2; :func:`show` is how a file name (or anything a user typed)
appears in a message or a report, undecodable bytes and control characters escaped.  No import
beyond the standard library.
"""

from __future__ import annotations

import os
import re
import reprlib
import stat
from typing import Any

__all__ = ["UsageError", "one_line", "show", "short", "fs_len", "size_text", "what_is", "torch_load_reason", "env_limit",
           "byte_count", "BYTE_UNITS", "BYTES_FORM"]


class UsageError(Exception):
    """Bad input or usage: reported as one line on stderr with exit code 2."""


ONE_LINE_MAX = 2000  # characters of a message line; beyond, it is cut (a value from a file may be a megabyte long)


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines included) made one space, cut after :data:`ONE_LINE_MAX`
    characters (``... (N characters in all)``)."""
    line = " ".join(str(text).split())
    if len(line) > ONE_LINE_MAX:
        line = f"{line[:ONE_LINE_MAX]}... ({len(line)} characters in all)"
    return line


_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def show(text: Any) -> str:
    """``text`` (a path or name) as it may be printed or stored: bytes that are not UTF-8 and control
    characters (terminal escape codes, bidirectional overrides) escaped, e.g. ``\\xff``, ``\\x1b``."""
    s = os.fspath(text) if isinstance(text, os.PathLike) else text
    if isinstance(s, bytes):
        s = s.decode("utf-8", "backslashreplace")
    s = str(s)
    if not _UNSAFE.search(s):
        return s
    try:
        s = os.fsencode(s).decode("utf-8", "backslashreplace")  # undecodable bytes of a file name: \xNN
    except UnicodeError:
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates that are no bytes: \udNNN

    def escape(m: re.Match[str]) -> str:
        o = ord(m.group())
        return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"

    return _UNSAFE.sub(escape, s)


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` as :func:`show` prints it, cut to about ``limit`` characters (a string read from a file may
    be a megabyte long): ``'xxxx...' (1000000 characters)``."""
    if isinstance(value, str) and len(value) > limit:
        return f"{show(repr(value[:limit]))[:-1]}...' ({len(value)} characters)"
    if isinstance(value, (list, tuple, dict, set, frozenset)):  # nested to any depth, of any length: a few levels
        text = show(_repr_of(limit).repr(value))
    else:
        text = show(repr(value))
    return text if len(text) <= limit + 20 else text[: limit + 20] + "..."


def _repr_of(limit: int) -> reprlib.Repr:
    """A ``repr`` of containers that shows a few levels and items (a file may hold a list nested 10^5 deep, whose
    plain ``repr`` raises ``RecursionError``, or a list of 10^7 items)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother = 3, limit, limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = 6
    return r


#: The units of a number of bytes (:func:`byte_count`): binary ``KiB``, ``MiB``, ``GiB``, ``TiB`` (powers of 1024) and
#: decimal ``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000), matched without regard to case; ``B`` or none: bytes.
BYTE_UNITS: dict[str, int] = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
                              "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
BYTES_FORM = "a positive whole number of bytes, optionally with a unit: KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, " \
             "GB, TB (powers of 1000), e.g. 65536 or 64MiB"
_BYTES = re.compile(r"([0-9]+)\s*([A-Za-z]*)")


def byte_count(text: str) -> int | None:
    """``text`` as a number of bytes, or ``None`` when it is not one: digits, then optionally one of
    :data:`BYTE_UNITS` (``"65536"``, ``"64KiB"``, ``"512 MiB"``, ``"2GB"``; no fraction, no sign, no exponent).

    Examples
    --------
    >>> from hypviz.base.messages import byte_count
    >>> byte_count("64MiB"), byte_count("2 GB"), byte_count("4096"), byte_count("1e9")
    (67108864, 2000000000, 4096, None)
    """
    m = _BYTES.fullmatch(text.strip())
    if m is None or m.group(2).lower() not in BYTE_UNITS:
        return None
    return int(m.group(1)) * BYTE_UNITS[m.group(2).lower()]


def env_limit(name: str, default: int, what: str, error: type[Exception] = UsageError) -> int:
    """A limit read from the environment variable ``name`` (a positive whole number of ``what``), else ``default``.

    A number of ``"bytes"`` may carry a unit (:func:`byte_count`: ``64MiB``).  Anything else is refused with one
    line naming the variable and the expected form (``error``: :class:`UsageError` for the command, ``ValueError``
    for a library call).
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if what == "bytes":
        value, form = byte_count(text) or 0, BYTES_FORM
    else:
        value, form = (int(text) if text.isascii() and text.isdigit() else 0), f"a positive whole number of {what}"
    if value < 1:
        raise error(f"{name} must be {form}, got {short(text)}")
    return value


def env_switch(name: str, off: str, on: str, error: type[Exception] = UsageError) -> bool:
    """A switch read from the environment variable ``name``: unset or ``1`` is on, ``0`` off; anything else is refused
    with one line saying what each value means (``off``, ``on``).

    >>> import os
    >>> os.environ["HYPVIZ_EXAMPLE"] = "yes"
    >>> env_switch("HYPVIZ_EXAMPLE", "never", "where it runs", ValueError)
    Traceback (most recent call last):
        ...
    ValueError: HYPVIZ_EXAMPLE must be 0 (never) or 1 (where it runs), got 'yes'
    >>> del os.environ["HYPVIZ_EXAMPLE"]
    """
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise error(f"{name} must be 0 ({off}) or 1 ({on}), got {short(value)}")
    return value != "0"


def torch_load_reason(exc: BaseException) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in one line, without torch's advice to load it with
    ``weights_only=False`` (which would run whatever the file's pickle asks for)."""
    text = str(exc)
    if "Weights only load failed" in text or "WeightsUnpickler" in text:
        m = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if m:
            return f"it holds a pickled {show(m.group(1))} object, not only tensors"
        return "it is not a torch.save file of tensors (its pickle is not one torch.load(weights_only=True) accepts)"
    lines = text.strip().splitlines()
    line = lines[0][:300] if lines else ""
    if re.search(r"weights_only|pickle\.load|unsafe|trust", line, re.I):
        line = "the file is not a torch.save file of tensors"
    return f"{type(exc).__name__}: {show(line)}"


def fs_len(name: str) -> int:
    """The length of ``name`` in bytes, as the file system counts it."""
    try:
        return len(os.fsencode(name))
    except UnicodeError:
        return len(name.encode("utf-8", "surrogatepass"))


def size_text(n: float) -> str:
    """A number of bytes in words: ``"8 GiB"``, ``"1.5 MiB"``, ``"2000 bytes"`` (3 significant digits)."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def what_is(path: Any) -> str:
    """What is at ``path``, in words: "a file", "a folder", "a FIFO (named pipe)", ..."""
    try:
        st = os.stat(path)
    except OSError:
        return "a broken symbolic link" if os.path.islink(path) else "missing"
    mode = st.st_mode
    for test, words in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "not a regular file"
