"""The statistics of a row block of :func:`hypviz.attention.compare`'s one-product path in one fused kernel.

The eager statistics (:mod:`hypviz.attention.comparison.row_blocks`) take some thirty elementwise and reduction passes
over each ``rows x M`` block; the kernel of ``fused_stats.cpp`` takes three over each row (chunk maxima and map
b's exponentials segment by segment while the segment is in cache, each relative to its segment's maximum; the
tilted moments, map a's weights following from b's as :math:`e_{a,j} = K e_{b,j} e^{x_j}`; the deviations of the
baselines and of the tilted TV), two exponentials per logit, with sums over blocks of 512 terms in the input's dtype
added in double.  It is compiled with the machine's C++ compiler (``CXX``, else g++; ``-O3 -march=native``) at
first use and cached in a folder only this user can write (``HYPVIZ_CACHE_DIR``, else ``~/.cache/hypviz``, made
mode 0700; a folder others can write is refused), with the SHA-256 of the library it built; it is loaded through
:mod:`ctypes` only when it is a regular file of this user's with that digest (anything else there is rebuilt
over), a failed build is remembered, and ``HYPVIZ_FUSED=0`` switches it off;
its OpenMP threads (torch's own runtime, loaded first: no second pool spinning beside it) split the block's rows
``torch.get_num_threads()`` ways.  :func:`availability` says whether it
can run here and why not.  The eager code stays the reference (``tests/test_compare_fused.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import torch

from hypviz.base.messages import env_switch

__all__ = ["availability", "switched_on", "shared_rows", "FLAGS"]

_SOURCE = Path(__file__).with_name("fused_stats.cpp")
#: The compiler flags: vectorised for this machine, products and sums contracted into FMA where it has them (every
#: pass computes a logit by the same expression, so alike; 12 % less time per logit here).
#: AVX-512 vectors where x86 has them (``-mprefer-vector-width`` is an x86 option).
FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-ffp-contract=fast", "-fno-math-errno", "-fno-trapping-math",
                          *(("-mprefer-vector-width=512",) if platform.machine() in ("x86_64", "AMD64") else ()),
                          "-fPIC", "-shared")
_COMPILE_TIMEOUT_S = 60
#: The largest library the loader reads (the kernel is about 100 KB; anything far larger is not it).
_MAX_LIBRARY_BYTES = 64 * 2**20


class _Job(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_void_p) for name in ("s", "c", "w", "tol_a", "tol_b", "gap")),
        *((name, ctypes.c_double) for name in ("alpha_a", "alpha_b", "small", "max_gap")),
        *((name, ctypes.c_int64) for name in ("rows", "m", "k", "chunk", "seg", "cache")),
        *((name, ctypes.c_void_p) for name in ("va", "vb", "a_at_ib", "b_at_ia", "ua", "ub", "peak_a", "peak_b", "kl", "tv")),
        ("ia", ctypes.c_void_p),
        ("ib", ctypes.c_void_p),
        ("flags", ctypes.c_void_p),
        ("status", ctypes.c_int),
    ]


def switched_on() -> bool:
    """``HYPVIZ_FUSED``: unset or ``1`` (use the kernel where it runs), ``0`` (never); anything else is a one-line
    ``ValueError``."""
    return env_switch("HYPVIZ_FUSED", "the eager statistics only", "the fused kernel where it runs", ValueError)


def _compiler() -> tuple[str | None, str]:
    """The C++ compiler (``CXX`` when set, else g++ or c++ on ``PATH``), or ``None`` and why not."""
    cxx = os.environ.get("CXX", "").strip()
    if cxx:
        found = shutil.which(cxx.split()[0])
        return (found, "") if found else (None, f"CXX={cxx!r} is not an executable program")
    found = shutil.which("g++") or shutil.which("c++")
    return (found, "") if found else (None, "no C++ compiler found (g++ or c++ on PATH, or CXX)")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _not_private(path: Path) -> str | None:
    """Why another user could change what lies under ``path`` (``None`` if only this user, or root, can).

    The folder and each folder above it must be owned by this user or root and writable by no one else, except
    folders with the sticky bit (``/tmp``), where others cannot rename or replace what this user owns.
    """
    uid = os.getuid()
    for i, folder in enumerate([path, *path.parents]):
        st = os.stat(folder)
        if not stat.S_ISDIR(st.st_mode):
            return f"{folder} is not a folder"
        if st.st_uid not in (uid, 0):
            return f"{folder} belongs to another user (uid {st.st_uid})"
        if st.st_mode & 0o022 and not (i > 0 and st.st_mode & stat.S_ISVTX):
            return f"{folder} is writable by others (mode {stat.S_IMODE(st.st_mode):o}; chmod go-w {folder} to use it)"
    return None


def _cache_folder() -> tuple[Path | None, str]:
    """The private folder of compiled kernels (``HYPVIZ_CACHE_DIR``, else ``~/.cache/hypviz``), made mode 0700."""
    folder = Path(os.environ.get("HYPVIZ_CACHE_DIR") or Path.home() / ".cache" / "hypviz").absolute()
    try:
        for missing in [*reversed(folder.parents), folder]:
            if not missing.exists():
                missing.mkdir(mode=0o700)
                os.chmod(missing, 0o700)  # whatever the umask
        why = _not_private(folder.resolve())
    except OSError as exc:
        return None, f"the cache folder {folder} cannot be used ({exc.strerror or exc})"
    return (None, f"the fused kernel is not loaded from a folder others can write: {why}") if why else (folder, "")


def _read_own(path: Path) -> tuple[int, bytes] | None:
    """An open descriptor of ``path`` and its bytes, if it is a regular file of this user's that no one else can write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022
            or st.st_size > _MAX_LIBRARY_BYTES):
        os.close(fd)
        return None
    with os.fdopen(os.dup(fd), "rb") as f:
        data = f.read(_MAX_LIBRARY_BYTES + 1)
    return fd, data


def _verified(lib_path: Path, digest_path: Path) -> int | None:
    """A descriptor of the library whose SHA-256 is the one its build recorded, or ``None``."""
    record = _read_own(digest_path)
    if record is None:
        return None
    os.close(record[0])
    got = _read_own(lib_path)
    if got is None:
        return None
    if hashlib.sha256(got[1]).hexdigest() != record[1].decode("ascii", "replace").strip():
        os.close(got[0])
        return None
    return got[0]


def _compile(cc: str, folder: Path, lib_path: Path, digest_path: Path) -> str | None:
    """Compile into ``lib_path`` and record its digest; why it failed, or ``None``.  Never leaves a temporary."""
    fd, tmp = tempfile.mkstemp(suffix=".so", prefix=".build-", dir=folder)
    os.close(fd)
    try:
        proc = subprocess.Popen([cc, *FLAGS, "-o", tmp, str(_SOURCE), "-lm"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=_COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its cc1plus, as and ld
            proc.communicate()
            return f"{cc} took more than {_COMPILE_TIMEOUT_S} s to compile it"
        if proc.returncode != 0:
            return f"it did not compile with {cc} ({(err.strip().splitlines() or ['no message'])[-1]})"
        os.chmod(tmp, 0o700)
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        _write_private(digest_path, digest + "\n")
        os.replace(tmp, lib_path)  # atomic: concurrent first uses each write their own file
        return None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _write_private(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".write-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@functools.lru_cache(maxsize=1)
def _load() -> tuple[ctypes.CDLL | None, str]:
    """The compiled kernel (compiling it on first use), or ``None`` and why not.

    Loaded only from a private folder (:func:`_not_private`), only a regular file of this user's whose SHA-256
    is the one recorded when it was compiled (the file loaded is the one read); a failed
    build is remembered (``fused_stats-<key>.failed``, for the same source, flags, compiler and CPU) and never
    retried until that file is deleted.
    """
    if not switched_on():
        return None, "the fused kernel is switched off (HYPVIZ_FUSED=0)"
    if platform.system() != "Linux":
        return None, f"the fused kernel is built for Linux only (this is {platform.system()})"
    cc, why = _compiler()
    if cc is None:
        return None, why
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"the C++ compiler {cc!r} does not run ({exc})"
    folder, why = _cache_folder()
    if folder is None:
        return None, why
    key = hashlib.sha256("\n".join([_SOURCE.read_text(), " ".join(FLAGS), cc, version, platform.machine(),
                                    _cpu_flags()]).encode()).hexdigest()[:20]
    lib_path, digest_path, failed_path = (folder / f"fused_stats-{key}{ext}" for ext in (".so", ".sha256", ".failed"))
    failed = _read_own(failed_path)
    if failed is not None:
        os.close(failed[0])
        before = failed[1].decode(errors="replace").strip()
        return None, f"the fused kernel failed to build before ({before}; delete {failed_path} to retry)"
    fd = _verified(lib_path, digest_path)
    if fd is None:
        try:
            failure = _compile(cc, folder, lib_path, digest_path)
        except OSError as exc:
            return None, f"the fused kernel could not be built in {folder} ({exc.strerror or exc})"
        if failure is not None:
            with contextlib.suppress(OSError):
                _write_private(failed_path, failure + "\n")
            return None, f"the fused kernel is not available: {failure}"
        fd = _verified(lib_path, digest_path)
        if fd is None:
            return None, f"the fused kernel built in {folder} does not match the digest recorded at its build"
    try:
        lib = ctypes.CDLL(str(lib_path))
        fn = lib.hypviz_shared_rows
        same = (lambda a, b: (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino))(os.stat(lib_path), os.fstat(fd))
    except (OSError, AttributeError) as exc:
        return None, f"the fused kernel did not load ({exc})"
    finally:
        os.close(fd)
    if not same:  # replaced between the check and the load: only this user could, but say so rather than use it
        return None, f"the fused kernel's library {lib_path} changed while it was loaded; run again"
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Job)]
    return lib, f"compiled by {version.strip() or cc} with {' '.join(FLAGS[:2])}"


def availability(dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
    """Whether the fused kernel runs for ``dtype`` on ``device``, and why (not): compiled (on first call) and loaded.

    Examples
    --------
    >>> import torch
    >>> from hypviz.attention.comparison.fused_stats import availability
    >>> availability(torch.float16, torch.device("cpu"))
    (False, 'the fused kernel takes float32 and float64 (the inputs are float16)')
    """
    if device.type != "cpu":
        return False, f"the fused kernel runs on the CPU (the blocks are on {device.type})"
    if dtype not in (torch.float32, torch.float64):
        return False, f"the fused kernel takes float32 and float64 (the inputs are {str(dtype).replace('torch.', '')})"
    lib, why = _load()
    return lib is not None, why


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def shared_rows(
    s: torch.Tensor, c: torch.Tensor, w: torch.Tensor, alphas: tuple[float, float], tol_a: torch.Tensor,
    tol_b: torch.Tensor, gap: torch.Tensor, top: int, small: float, max_gap: float, segment: int | None = None,
    cache: int | None = None,
) -> dict[str, torch.Tensor]:
    r"""Every per-row statistic of a one-product block: the maps' logits :math:`l_{a|b} = S - \alpha_{a|b}\, c\, w^\top`.

    ``s``: the block's product ``(rows, M)`` (contiguous, read only); ``c`` ``(rows,)``, ``w`` ``(M,)``; ``tol_a``,
    ``tol_b``: the logits' rounding bounds per row; ``gap``: each row's spread of :math:`\log P_a - \log P_b`.
    Returns (double, per row): ``va``, ``ia``, ``vb``, ``ib`` (each map's ``top`` largest, descending; among tied values
    the first index), ``a_at_ib``, ``b_at_ia`` (each map's logits at the other's top keys); the uniform
    baselines ``ua``, ``ub`` and peaks ``pa``, ``pb`` (:math:`\mathrm{TV}(P, U)` and :math:`M \max_j P_j`, from
    :math:`e_j = e^{l_j - \max l}`: :math:`\tfrac12 \sum_j |e_j - Z/M| / Z` and :math:`M / Z`, or on rows whose
    ``tol < small`` without cancellation as :func:`hypviz.attention.comparison.row_blocks.tv_uniform`); ``kl``, ``tv``
    (the tilted forms of :func:`hypviz.attention.comparison.row_blocks.block_stats` with :math:`x_j = (\alpha_b -
    \alpha_a) c (w_j - E_{P_b} w)`: :math:`\mathrm{KL} = \log(1 + m_1) - E_{P_b} x`, :math:`\mathrm{TV} = \tfrac12
    E_{P_b} |e^x - 1 - m_1| / (1 + m_1)`, :math:`m_1 = E_{P_b}[e^x - 1]`); ``flags`` (int32): bit 0 where
    ``gap > max_gap`` (KL and TV left to the caller, NaN), bit 1, 2 where map a's, b's baseline is (near-uniform
    rows whose centred logits span more than ``max_gap``).  ``segment``: keys per segment of the first pass (``None``:
    the whole row); ``cache``: the bytes of cache per thread (``None``: unbounded); where a row's ``3 M`` values
    exceed it, rows of a narrow gap recompute :math:`e^x - 1` in the last pass rather than keep it.

    Examples
    --------
    >>> import torch
    >>> from hypviz.attention.comparison.fused_stats import availability, shared_rows
    >>> s = torch.tensor([[0.0, 1.0, 2.0]])
    >>> c, w, tol, gap = torch.ones(1), torch.tensor([0.0, 0.5, 1.0]), torch.full((1,), 1e-6), torch.ones(1)
    >>> ub = 0.5 * (torch.softmax(s - w, dim=-1) - 1 / 3).abs().sum()  # map b's TV from uniform, eagerly
    >>> round(float(ub), 4)
    0.1731
    >>> if availability(torch.float32, torch.device("cpu"))[0]:  # the kernel (compiled on first use) agrees
    ...     r = shared_rows(s, c, w, (0.0, 1.0), tol, tol, gap, 2, 1e-6, 30.0)
    ...     assert r["ia"].tolist() == [[2, 1]] and abs(float(r["ub"]) - float(ub)) < 1e-6
    """
    lib, why = _load()
    if lib is None:
        raise RuntimeError(why)
    rows, m = s.shape
    dt = s.dtype
    if not (s.is_contiguous() and dt in (torch.float32, torch.float64) and s.device.type == "cpu"):
        raise ValueError(f"s must be a contiguous float32 or float64 CPU tensor, got {dt} on {s.device}")
    c, w, tol_a, tol_b, gap = (t.to(dt).contiguous() for t in (c, w, tol_a, tol_b, gap))
    res = {name: torch.empty(rows, top, dtype=torch.float64) for name in ("va", "vb", "a_at_ib", "b_at_ia")}
    res.update({name: torch.empty(rows, top, dtype=torch.int64) for name in ("ia", "ib")})
    res.update({name: torch.empty(rows, dtype=torch.float64) for name in ("ua", "ub", "pa", "pb", "kl", "tv")})
    res["flags"] = torch.zeros(rows, dtype=torch.int32)
    chunk = max(64, int(m**0.5))
    job = _Job(
        s=_ptr(s), c=_ptr(c), w=_ptr(w), tol_a=_ptr(tol_a), tol_b=_ptr(tol_b), gap=_ptr(gap),
        alpha_a=float(alphas[0]), alpha_b=float(alphas[1]), small=float(small), max_gap=float(max_gap),
        rows=rows, m=m, k=top, chunk=chunk, seg=m if segment is None else max(1, int(segment)),
        cache=2**62 if cache is None else int(cache),
        va=_ptr(res["va"]), vb=_ptr(res["vb"]), a_at_ib=_ptr(res["a_at_ib"]), b_at_ia=_ptr(res["b_at_ia"]),
        ua=_ptr(res["ua"]), ub=_ptr(res["ub"]), peak_a=_ptr(res["pa"]), peak_b=_ptr(res["pb"]),
        kl=_ptr(res["kl"]), tv=_ptr(res["tv"]), ia=_ptr(res["ia"]), ib=_ptr(res["ib"]), flags=_ptr(res["flags"]),
        status=0,
    )
    if rows and lib.hypviz_shared_rows(int(dt == torch.float64), torch.get_num_threads(), ctypes.byref(job)) != 0:
        raise MemoryError(f"the fused kernel could not allocate its scratch rows (M = {m})")
    return res
