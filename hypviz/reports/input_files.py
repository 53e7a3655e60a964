r"""Reading the user's files: one float array per role (QUERIES, KEYS), refused early when unusable.

:func:`check_file` refuses a missing file, a folder, anything that is not a regular file (a FIFO
would block) and unknown formats; :func:`read_input` reads one array from a ``.npy``/``.npz``
file with numpy alone (the ``.npy`` headers checked before any data is read or decompressed, so an
array above :func:`max_input_bytes` or one holding pickled objects is refused unread) or from a
``.pt``/``.pth`` file with ``torch.load(weights_only=True)`` (a dense tensor or a dict of
tensors).  A scalar ``k`` (or ``curvature``) stored beside the arrays is remembered in
:data:`STORED_K` and used by :func:`resolve_k`.  hypviz never unpickles anything but tensors.
"""

from __future__ import annotations

import math
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Any, Sequence

from hypviz.base.messages import UsageError, env_limit, short, show, size_text, torch_load_reason, what_is

__all__ = [
    "FORMATS", "ROLE_NAMES", "MAX_INPUT_ENV", "DEFAULT_MAX_INPUT_BYTES", "STORED_K", "check_file",
    "max_input_bytes", "too_big", "read_input", "load_array", "resolve_k", "native_order", "MAX_LAYERS_ENV",
    "DEFAULT_MAX_LAYERS", "MAX_NAME_ENV", "DEFAULT_MAX_NAME_CHARS", "max_layers", "max_name_chars", "load_torch_file",
    "expanded_bytes", "Unreadable",
]

FORMATS = (".pt", ".pth", ".npy", ".npz")
ROLE_NAMES = {"QUERIES": ("queries", "query", "q", "Q"), "KEYS": ("keys", "key", "k", "K")}
MAX_INPUT_ENV = "HYPVIZ_MAX_INPUT_BYTES"
DEFAULT_MAX_INPUT_BYTES = 2 * 1024**3  # 2 GiB: the largest array (.npy/.npz) or file (.pt) read
MAX_LAYERS_ENV = "HYPVIZ_MAX_LAYERS"
DEFAULT_MAX_LAYERS = 64  # layer records of a capture file analysed (the layers figure is 3.4 inches a layer)
MAX_NAME_ENV = "HYPVIZ_MAX_NAME_CHARS"
DEFAULT_MAX_NAME_CHARS = 256  # characters of a name read from a file (a layer's, an array's)
STORED_K: dict[str, float] = {}  # path -> the curvature parameter a .pt dict or .npz stored as "k"


def check_file(path: str, role: str) -> Path:
    """Refuse a missing file, a folder, anything that is not a regular file (a FIFO would block), an unknown format."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{role}: no such file: {show(path)}") from None
    except ValueError:  # an embedded NUL
        raise UsageError(f"{role}: the file name {show(path)} holds a NUL character") from None
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {show(path)}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{role}: {show(path)} is a folder; expected a .pt, .pth, .npy or .npz file")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(
            f"{role}: {show(path)} is not a regular file (it is {what_is(p)}); expected a .pt, .pth, .npy or .npz file "
            "(hypviz does not read from pipes or devices)"
        )
    if p.suffix.lower() not in FORMATS:
        what = f"'{show(p.suffix)}'" if p.suffix else "no extension"
        raise UsageError(f"{role}: unknown format ({what}) for {show(path)}; expected .pt, .pth, .npy or .npz")
    return p


def max_input_bytes() -> int:
    """The largest input read: ``HYPVIZ_MAX_INPUT_BYTES`` (a positive number of bytes), default 2 GiB.

    It bounds what a file expands to, not its size on disk: the bytes of every array it holds (elements x item
    size, a broadcast or compressed one counted as it will be once read), taken before anything is materialised."""
    return env_limit(MAX_INPUT_ENV, DEFAULT_MAX_INPUT_BYTES, "bytes")


def max_layers() -> int:
    """The most layer records a capture file may hold: ``HYPVIZ_MAX_LAYERS``, default 64."""
    return env_limit(MAX_LAYERS_ENV, DEFAULT_MAX_LAYERS, "layers")


def max_name_chars() -> int:
    """The longest name (of a layer, an array, a string field) read from a file: ``HYPVIZ_MAX_NAME_CHARS``, default 256."""
    return env_limit(MAX_NAME_ENV, DEFAULT_MAX_NAME_CHARS, "characters")


def too_big(role: str, what: str, nbytes: int, limit: int) -> UsageError:
    """The error for an input of ``nbytes`` above ``limit``, naming the variable that raises the limit."""
    return UsageError(
        f"{role}: {what} is {size_text(nbytes)} ({nbytes} bytes), above the input limit of {size_text(limit)}; "
        f"set {MAX_INPUT_ENV} to a larger number of bytes to read it"
    )


def _pick(entries: dict[str, Any], path: Path, role: str, name: str | None, option: str) -> tuple[Any, str]:
    names = list(entries)
    shown = ", ".join(short(n, 40)[1:-1] if len(n) <= 40 else short(n, 40) for n in names[:12])
    shown += ", ..." if len(names) > 12 else ""
    if name is not None:
        if name not in entries:
            raise UsageError(f"{role}: {show(path)} has no array named {short(name)} (it holds: {shown or 'nothing'})")
        return entries[name], name
    if not names:
        raise UsageError(f"{role}: {show(path)} holds no arrays of rank 1 or more")
    if len(names) == 1:
        if len(names[0]) > max_name_chars():
            raise UsageError(
                f"{role}: the array name in {show(path)} is {len(names[0])} characters long, above the limit of "
                f"{max_name_chars()}; set {MAX_NAME_ENV} to a larger number to read it"
            )
        return entries[names[0]], names[0]
    for candidate in ROLE_NAMES[role]:
        if candidate in entries:
            return entries[candidate], candidate
    raise UsageError(f"{role}: {show(path)} holds {len(names)} arrays ({shown}); choose one with {option} NAME")


def _numpy_detail(exc: BaseException) -> str:
    """numpy's reason, without its advice to load the file unsafely: hypviz never unpickles."""
    text = _first_line(exc)
    if re.search(r"pickle|unsafe|trust", text, re.I):
        return "it holds pickled Python objects, which hypviz never unpickles"
    return f"{type(exc).__name__}: {text}"


def _torch_detail(exc: BaseException) -> str:
    """torch.load's reason, without its advice to load the file with weights_only=False."""
    return torch_load_reason(exc)


def _not_npy(head: bytes) -> str:
    """Why a stream that should be a .npy array is not one, from its first bytes."""
    if not head:
        return "it is empty"
    if head.startswith(b"PK\x03\x04"):
        return "it is a zip archive (an .npz, or a torch.save file: name it .npz or .pt)"
    if head[:1] == b"\x80":
        return "it is a Python pickle (a torch.save file? name it .pt); hypviz never unpickles"
    return "it does not start with the .npy magic string \\x93NUMPY"


def _npy_header(fp, role: str, where: str):
    """``(shape, fortran_order, dtype)`` from the header of a .npy stream, read before any data."""
    import numpy as np

    fmt = np.lib.format
    head = fp.read(8)
    if len(head) < 8 or not head.startswith(b"\x93NUMPY"):
        raise UsageError(f"{role}: {where} is not a .npy array file: {_not_npy(head)}")
    version = (head[6], head[7])
    try:
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fp)
        elif version == (3, 0) and hasattr(fmt, "_read_array_header"):
            shape, fortran, dtype = fmt._read_array_header(fp, version)
        else:
            raise UsageError(f"{role}: {where} is a .npy file of an unknown format version {version[0]}.{version[1]}")
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{role}: {where} is not a .npy array file: its header cannot be read ({_numpy_detail(exc)})") from None
    return tuple(int(n) for n in shape), bool(fortran), dtype


def _refuse_header(role: str, what: str, shape: tuple, dtype, limit: int) -> int:
    """Refuse pickled objects and arrays above the limit, from a .npy header; returns the size in bytes."""
    if dtype.hasobject:
        raise UsageError(
            f"{role}: {what} holds Python objects (dtype object, stored as a pickle); hypviz never unpickles: "
            "save float32/float64 arrays"
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limit:
        raise too_big(role, f"{what} holds an array of shape {shape} {dtype} and", nbytes, limit)
    return nbytes


def _load_npy(path: Path, role: str, limit: int):
    import numpy as np

    try:
        with open(path, "rb") as fp:
            shape, _, dtype = _npy_header(fp, role, show(path))
            nbytes = _refuse_header(role, show(path), shape, dtype, limit)
            have = os.fstat(fp.fileno()).st_size - fp.tell()
            if have < nbytes:
                raise UsageError(
                    f"{role}: {show(path)} is truncated: its header promises shape {shape} {dtype} ({nbytes} bytes), "
                    f"the file holds {have} bytes of data"
                )
            fp.seek(0)
            return np.lib.format.read_array(fp, allow_pickle=False)
    except UsageError:  # as it is (signals, which raise BaseExceptions, are never caught here)
        raise
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {show(path)}: {exc.strerror or exc}") from None
    except Exception as exc:
        raise UsageError(f"{role}: cannot read {show(path)} as .npy: {_numpy_detail(exc)}") from None


def _load_npz(path: Path, role: str, name: str | None, option: str, limit: int):
    """One array of an .npz, found by the members' .npy headers: only the chosen array is decompressed."""
    import numpy as np

    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, EOFError):
        with open(path, "rb") as fp:
            head = fp.read(8)
        if head.startswith(b"PK\x03\x04"):
            raise UsageError(
                f"{role}: {show(path)} is truncated or damaged: it starts as a zip archive (an .npz) but its zip "
                f"directory, at the end of the file, is missing ({size_text(os.stat(path).st_size)} on disk)"
            ) from None
        hint = ": it looks like a .npy file, name it .npy" if head.startswith(b"\x93NUMPY") else " (a zip of .npy files)"
        raise UsageError(f"{role}: {show(path)} is not an .npz archive{hint}") from None
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {show(path)}: {exc.strerror or exc}") from None
    member = ""
    try:
        with zf:
            headers = {}
            for info in zf.infolist():
                if info.is_dir() or not info.filename.endswith(".npy"):
                    continue
                member = info.filename[:-4]
                with zf.open(info) as fp:
                    shape, _, dtype = _npy_header(fp, role, f"{show(path)} [{show(member)}]")
                headers[member] = (info, shape, dtype)
            for key in ("k", "curvature"):  # a scalar k stored beside the arrays
                if key in headers and headers[key][1] == () and headers[key][2].kind in "iuf":
                    member = key
                    with zf.open(headers[key][0]) as fp:
                        _remember_k(path, np.lib.format.read_array(fp, allow_pickle=False))
                    break
            entries = {key: h for key, h in headers.items() if len(h[1]) >= 1}
            (info, shape, dtype), chosen = _pick(entries, path, role, name, option)
            member = chosen
            what = f"{show(path)} [{show(chosen)}]"
            nbytes = _refuse_header(role, what, shape, dtype, limit)
            if info.file_size < nbytes:
                raise UsageError(f"{role}: {what} is truncated: its header promises shape {shape} {dtype} ({nbytes} bytes)")
            with zf.open(info) as fp:
                return np.lib.format.read_array(fp, allow_pickle=False), chosen
    except UsageError:  # as it is (signals, which raise BaseExceptions, are never caught here)
        raise
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {show(path)}: {exc.strerror or exc}") from None
    except Exception as exc:
        where = f" [{show(member)}]" if member else ""
        raise UsageError(f"{role}: cannot read {show(path)}{where}: {_numpy_detail(exc)}") from None


def _tensor_problem(t) -> str | None:
    """What makes a loaded tensor unusable as coordinates, in words, or None."""
    import torch

    if getattr(t, "is_nested", False):
        return "a nested tensor"
    if t.layout != torch.strided:
        return f"a sparse tensor (layout {t.layout})"
    if t.is_meta:
        return "a meta tensor (a shape with no data)"
    if t.is_quantized:
        return f"a quantised tensor (dtype {t.dtype})"
    if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return None
    if "float8" in str(t.dtype):
        return f"a float8 tensor (dtype {t.dtype})"
    if t.is_complex():
        return f"a complex tensor (dtype {t.dtype})"
    if t.dtype == torch.bool or not t.is_floating_point():
        return f"integers (dtype {t.dtype})"
    return f"a tensor of dtype {t.dtype}"


def _ndim(v: Any) -> int:
    try:
        return int(v.ndim)
    except Exception:
        return 1


def expanded_bytes(obj: Any) -> int:
    """The bytes every tensor and array in ``obj`` (nested dicts, lists, tuples) occupies once made dense and
    contiguous: elements x item size, from shapes alone (a broadcast, stride-0 tensor counts at its full size).

    Each object is visited once (by identity, without recursion): a container referenced many times, or nested
    to any depth, costs one visit, so the time is linear in the number of distinct objects the file holds, which
    its size bounds; a tensor referenced twice is counted once, as it is stored once."""
    import numpy as np
    import torch

    total = 0
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            total += int(item.numel()) * int(item.element_size())
        elif isinstance(item, np.ndarray):
            total += int(item.size) * int(item.itemsize)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


def _zip_bytes(path: Path, role: str, size: int) -> int | None:
    """What a torch.save zip file's members hold once decompressed (their declared sizes, which bound what
    torch's reader allocates), or None for a file that is not a zip (the legacy format: its size is its data).

    A file that starts as a zip archive but whose directory (at its end) is missing, or whose members reach past
    its end, is refused as truncated, naming the file."""
    try:
        with open(path, "rb") as fp:
            head = fp.read(4)
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {show(path)}: {exc.strerror or exc}") from None
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        if head == b"PK\x03\x04":
            raise UsageError(
                f"{role}: {show(path)} is truncated or damaged: it starts as a zip archive (a torch.save file) but its "
                f"zip directory, at the end of the file, is missing ({size_text(size)} on disk)"
            ) from None
        return None
    for info in infos:
        if info.header_offset + info.compress_size > size:
            raise UsageError(
                f"{role}: {show(path)} is truncated or damaged: its member {short(info.filename)} reaches past the end "
                f"of the file ({size_text(size)} on disk)"
            )
    return sum(info.file_size for info in infos)


class Unreadable(UsageError):
    """A file ``torch.load(weights_only=True)`` refuses; ``reason`` says why in a few words (never torch's advice
    to load it unsafely)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def load_torch_file(path: Path, role: str, limit: int) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, refused before loading when the file, or what its zip
    members decompress to, is above ``limit`` bytes, and after loading (before any tensor is made dense) when its
    tensors expand to more; a refusal is a :class:`UsageError` naming ``HYPVIZ_MAX_INPUT_BYTES``."""
    size = os.stat(path).st_size
    if size > limit:
        raise too_big(role, f"the file {show(path)}", size, limit)
    unzipped = _zip_bytes(path, role, size)
    if unzipped is not None and unzipped > limit:
        raise too_big(role, f"what the file {show(path)} ({size_text(size)} on disk) decompresses to", unzipped, limit)
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:  # a read that fails (EINVAL on a file cut short, EIO): the file named, in one line
        raise UsageError(
            f"{role}: cannot read {show(path)} ({size_text(size)} on disk): {show(exc.strerror or exc)}; "
            "is it truncated or damaged?"
        ) from None
    except Exception as exc:  # unpickling errors of many kinds: all mean "not a readable torch file"
        reason = torch_load_reason(exc)
        raise Unreadable(
            f"{role}: cannot read {show(path)} with torch.load(weights_only=True), is it a torch.save file of tensors? "
            f"({reason})",
            reason,
        ) from None
    nbytes = expanded_bytes(obj)
    if nbytes > limit:
        raise too_big(role, f"what the tensors in {show(path)} take once made dense", nbytes, limit)
    return obj


def _load_torch(path: Path, role: str, name: str | None, option: str, limit: int):
    import numpy as np
    import torch

    obj = load_torch_file(path, role, limit)
    chosen = None
    if isinstance(obj, dict):
        _remember_k(path, obj.get("k", obj.get("curvature")))
        tensors = {str(key): v for key, v in obj.items() if isinstance(v, (torch.Tensor, np.ndarray)) and _ndim(v) >= 1}
        obj, chosen = _pick(tensors, path, role, name, option)
    elif name is not None:
        raise UsageError(f"{role}: {show(path)} holds a single {type(obj).__name__}, not named arrays; drop {option}")
    made = None
    if isinstance(obj, torch.Tensor):
        problem = _tensor_problem(obj)
        if problem:
            raise UsageError(
                f"{role}: {show(path)} holds {problem}; expected a dense float16/bfloat16/float32/float64 tensor"
            )
        obj = obj.detach().cpu().resolve_conj().resolve_neg()
        if obj.dtype == torch.bfloat16:  # numpy has no bfloat16: its values exactly, in float32
            obj, made = obj.float(), "bfloat16"
        obj = obj.numpy()
    if not isinstance(obj, np.ndarray):
        raise UsageError(f"{role}: {show(path)} holds a {type(obj).__name__}; expected a tensor or a dict of tensors")
    return obj, chosen, made


def read_input(path: Path, role: str, name: str | None, option: str):
    """Read one array from ``path``; returns ``(array, chosen_name, made_in)``.

    ``array`` is a native-byte-order float16/float32/float64 numpy array (bfloat16 tensors come as
    float32 holding their exact values), ``made_in`` the name of the dtype the values were made in
    ("bfloat16", "float16", "float32", ...).  ``.npy``/``.npz`` are read with numpy alone (no torch
    import: bad input fails fast), their ``.npy`` headers checked before any data is read;
    ``.pt``/``.pth`` with ``torch.load(weights_only=True)``, a tensor or a dict of tensors.
    """
    limit = max_input_bytes()
    suffix = path.suffix.lower()
    chosen = made = None
    if suffix in (".pt", ".pth"):
        arr, chosen, made = _load_torch(path, role, name, option, limit)
    elif suffix == ".npz":
        arr, chosen = _load_npz(path, role, name, option, limit)
    else:
        if name is not None:
            raise UsageError(f"{role}: {show(path)} is a single .npy array; drop {option}")
        arr = _load_npy(path, role, limit)
    arr, made_here = _to_float(arr, role, path)
    return arr, chosen, made or made_here


def load_array(path: Path, role: str, name: str | None, option: str):
    """Read one array from ``path`` as a float16/float32/float64 numpy array; returns ``(array, chosen_name)``
    (see :func:`read_input`, which also says the dtype the values were made in)."""
    arr, chosen, _ = read_input(path, role, name, option)
    return arr, chosen



def _remember_k(path: Path, value: Any) -> None:
    """Keep a scalar ``k`` stored beside the arrays (a number or a 0-d/1-element tensor or array)."""
    if value is None:
        return
    try:
        kf = float(value.item() if hasattr(value, "item") else value)
    except Exception:  # a meta or sparse tensor, a string, ...: not a k
        return
    if math.isfinite(kf) and kf > 0:
        STORED_K[str(path)] = kf


def resolve_k(given: float | None, paths: Sequence[Path]) -> tuple[float, str]:
    """``--k`` when given, else the ``k`` stored in an input file (both files must agree), else 1."""
    if given is not None:
        return given, ""
    found = {str(p): STORED_K[str(p)] for p in paths if str(p) in STORED_K}
    values = set(found.values())
    if len(values) > 1:
        shown = ", ".join(f"{show(p)}: k = {v:g}" for p, v in found.items())
        raise UsageError(f"the input files store different curvature parameters k ({shown}); pass --k")
    if values:
        kf = values.pop()
        return kf, f"using k = {kf:g} stored in {show(', '.join(sorted(set(found))))} (pass --k to override)"
    return 1.0, ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def native_order(arr):
    """``arr`` in the native byte order of the same precision (a big-endian float32 stays float32)."""
    if arr.dtype.byteorder not in ("=", "|") and not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _to_float(arr: Any, role: str, path: Path):
    """``(array, made_in)``: float16/float32/float64 in native byte order, C-contiguous, 0-d kept 0-d."""
    import numpy as np

    arr = native_order(np.asarray(arr))
    if arr.dtype.kind in "iub":
        raise UsageError(f"{role}: {show(path)} holds integers (dtype {arr.dtype}); expected float32 or float64 coordinates")
    if arr.dtype.kind != "f":
        raise UsageError(
            f"{role}: {show(path)} holds an array of dtype {arr.dtype}; expected float32 or float64 coordinates"
        )
    made = arr.dtype.name
    if arr.dtype not in (np.float16, np.float32, np.float64):
        arr = arr.astype(np.float64)  # long double: rounded to float64, checked at float64's tolerance
    if not (arr.flags.c_contiguous and arr.flags.writeable):
        arr = np.array(arr, order="C")  # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return arr, made
