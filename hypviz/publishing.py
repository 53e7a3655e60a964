r"""The report's way onto disk: the output folder checked first, written last, published in one step.

:func:`check_out` refuses an ``--out`` that cannot be replaced safely before anything is computed;
:func:`produce` writes the report into a temporary folder ``.NAME.tmp-XXXXXXXX`` beside ``--out``
and :func:`publish` puts it in place in one step: ``renameat2(RENAME_NOREPLACE)``, or, replacing
an existing report (``--force``), ``renameat2(RENAME_EXCHANGE)`` (Linux, through ctypes: glibc's
``renameat2`` or the raw system call), the old folder then removed.  Where ``renameat2`` is
unavailable, two renames with signals deferred across them.

Signals: :func:`install_handlers` makes SIGTERM, SIGHUP and (while Python's default handler is
installed) SIGINT raise :class:`Interrupted`, except inside a step that must not be cut in two (a
rename and the record of it, :data:`RUN`), where the signal is acted on when the step ends; so
:func:`interrupted_message` always says truthfully whether the new report was published.
``HYPVIZ_TEST_PAUSE_AT=STAGE[:SIGNAL]`` (:data:`PAUSE_ENV`, tests only) makes the command signal
itself at one of :data:`STAGES`.  Nothing here imports beyond the standard library.
"""

from __future__ import annotations

import errno
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from hypviz._messages import UsageError, fs_len, show, what_is

__all__ = [
    "MARKER", "PAUSE_ENV", "STAGES", "TMP_EXTRA", "check_out", "publish", "produce", "Interrupted", "RUN",
    "on_signal", "install_handlers", "restore_handlers", "interrupted_message",
]

MARKER = "metrics.json"  # a folder holding this file, written by hypviz, may be replaced with --force
PAUSE_ENV = "HYPVIZ_TEST_PAUSE_AT"  # tests only: STAGE[:SIGNAL], the command signals itself at that stage
STAGES = ("tmp", "written", "swapped", "cleaned")
TMP_EXTRA = len(".") + len(".tmp-") + 8  # what mkdtemp's ".NAME.tmp-XXXXXXXX" adds to NAME (".old-" is as long)


def _is_report(path: Path) -> bool:
    marker = path / MARKER
    try:
        return marker.is_file() and '"generator": "hypviz"' in marker.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return False


def _pathconf(folder: Path, name: str, default: int) -> int:
    try:
        value = os.pathconf(folder, name)
    except (OSError, ValueError):
        return default
    return value if value and value > 0 else default


def check_out(out: Path, force: bool, inputs: Sequence[Path] = ()) -> Path:
    """Refuse an output folder that exists (without ``--force``), is not a report, holds an input,
    lies under something that is not a folder, or whose name (plus the temporary suffix) is too long."""
    out = Path(os.path.abspath(out))
    if not out.name:
        raise UsageError(f"--out {show(out)} is the root folder; choose a folder to create")
    parent = out.parent
    if not os.path.isdir(parent):
        probe = parent
        while not os.path.lexists(probe) and probe.parent != probe:
            probe = probe.parent
        if os.path.lexists(probe) and not os.path.isdir(probe):
            where = f"the parent of --out, {show(probe)}," if probe == parent else f"--out {show(out)} lies under {show(probe)}, which"
            raise UsageError(f"{where} is {what_is(probe)}, not a folder; choose an --out inside a folder")
        if os.path.isdir(probe) and not os.access(probe, os.X_OK):
            raise UsageError(f"cannot look inside {show(probe)} (permission denied) for the parent of --out {show(out)}")
        raise UsageError(f"the parent folder of --out does not exist: {show(parent)} (create it first)")
    name_max = _pathconf(parent, "PC_NAME_MAX", 255)
    nbytes = fs_len(out.name)
    if nbytes + TMP_EXTRA > name_max:
        shown = show(out.name[:20]) + ("..." if len(out.name) > 20 else "")
        raise UsageError(
            f"--out name too long: {shown} is {nbytes} bytes; at most {name_max - TMP_EXTRA} here (the file system "
            f"allows {name_max} per name, and hypviz first writes a temporary folder .NAME.tmp-XXXXXXXX beside it, "
            f"{TMP_EXTRA} bytes longer)"
        )
    path_max = _pathconf(parent, "PC_PATH_MAX", 4096)
    if fs_len(str(parent)) + 1 + nbytes + TMP_EXTRA >= path_max:
        raise UsageError(f"--out path too long: {fs_len(str(out))} bytes; the file system allows {path_max} per path "
                         f"including the {TMP_EXTRA} bytes of the temporary name")
    if out.exists() or out.is_symlink():
        if not force:
            raise UsageError(f"output folder {show(out)} already exists; pass --force to replace it, or choose another --out")
        if out.is_symlink() or not out.is_dir():
            raise UsageError(f"--out {show(out)} exists and is {what_is(out) if not out.is_symlink() else 'a symbolic link'}, "
                             "not a folder; not replacing it")
        if any(out.iterdir()) and not _is_report(out):
            raise UsageError(
                f"--force would replace {show(out)}, which is not a hypviz report (no {MARKER} written by hypviz); "
                "remove it yourself or choose another --out"
            )
        cwd = Path(os.path.abspath(os.getcwd()))
        if cwd == out or out in cwd.parents:
            raise UsageError(f"--force would replace {show(out)}, which holds the current folder; choose another --out")
        for p in inputs:
            p = Path(os.path.abspath(p))
            if out in p.parents:
                raise UsageError(
                    f"--force would replace {show(out)}, which holds the input {show(p)}; copy the input elsewhere first"
                )
    return out


def _temp_dir(out: Path) -> Path:
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise UsageError(f"cannot write into {show(out.parent)}: {exc.strerror or exc}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders; a report is an ordinary folder
    return tmp


# --- signals: what a run has put on disk, and signals deferred across each step that changes it ----------- #
class Interrupted(BaseException):
    """Raised by the signal handler (SIGTERM, SIGHUP, SIGINT) so that the clean-up paths run."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _RunState:
    """What this run has done (``published``: the new report is at this path) and its signal bookkeeping."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.published: Path | None = None
        self.critical = 0  # > 0: inside a step that must not be cut (a rename and the record of it)
        self.pending: int | None = None  # a signal that arrived inside such a step
        self.done = False  # set once an interruption was raised or the command has finished: later signals are noted only
        self.delivered = 0  # how many signals the handler has seen (the test hook waits for its own)
        self.signal: int | None = None  # the signal an interruption was raised for (even if a library swallowed it)


RUN = _RunState()


def on_signal(signum: int, frame: Any) -> None:
    """The handler :func:`install_handlers` installs: raise :class:`Interrupted`, or defer it to the end of a step."""
    RUN.delivered += 1
    if RUN.done:
        return
    if RUN.critical:
        if RUN.pending is None:
            RUN.pending = signum
        return
    RUN.done, RUN.signal = True, signum
    raise Interrupted(signum)


class _Critical:
    """A step that a signal must not cut in two: signals arriving inside are acted on when it ends."""

    def __enter__(self) -> None:
        RUN.critical += 1

    def __exit__(self, *exc: Any) -> None:
        RUN.critical -= 1
        if not RUN.critical and RUN.pending is not None and not RUN.done:
            signum, RUN.pending = RUN.pending, None
            RUN.done, RUN.signal = True, signum
            raise Interrupted(signum)


def install_handlers(previous: dict[int, Any]) -> None:
    """Our handler for SIGTERM, SIGHUP and (when it is Python's default) SIGINT; the previous ones go into ``previous``
    as each is replaced (so that they are restored even if a signal arrives in between)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN or (name == "SIGINT" and current is not signal.default_int_handler):
            continue  # ignored on purpose (nohup), or someone else's SIGINT handler (a notebook kernel)
        try:
            previous[signum] = current
            signal.signal(signum, on_signal)
        except (ValueError, OSError):
            previous.pop(signum, None)


def restore_handlers(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`install_handlers` replaced."""
    for signum, handler in previous.items():
        try:
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def _stage(name: str) -> None:
    """Tests only: at stage ``name`` of ``HYPVIZ_TEST_PAUSE_AT=STAGE[:SIGNAL]`` send ourselves the signal."""
    spec = os.environ.get(PAUSE_ENV, "")
    if not spec:
        return
    stage, _, signame = spec.partition(":")
    if stage != name:
        return
    signum = getattr(signal, "SIG" + signame.upper().removeprefix("SIG"), None) if signame else signal.SIGTERM
    if signum is None:
        return
    before = RUN.delivered
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + 5.0
    while RUN.delivered == before and time.monotonic() < deadline:  # another thread may take it: wait for the handler
        time.sleep(0.001)


def _discard(path: Path | None) -> None:
    """Remove a temporary or swapped-out folder, signals deferred until it is gone."""
    if path is None:
        return
    with _Critical():
        shutil.rmtree(path, ignore_errors=True)


# --- renameat2 through ctypes -------------------------------------------------------------------------------- #
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {  # the system call's number where libc has no renameat2 (glibc < 2.28)
    "x86_64": 316, "amd64": 316, "i386": 353, "i686": 353, "aarch64": 276, "arm64": 276, "riscv64": 276,
    "loongarch64": 276, "armv7l": 382, "armv6l": 382, "ppc64le": 357, "ppc64": 357, "s390x": 347,
}
_RENAMEAT2: Any = None  # resolved on first use: a function (old, new, flags) -> errno (0: done), or False


def _find_renameat2() -> Callable[[bytes, bytes, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
        fn.restype = ctypes.c_int

        def call(old: bytes, new: bytes, flags: int) -> int:
            return 0 if fn(AT_FDCWD, old, AT_FDCWD, new, flags) == 0 else ctypes.get_errno()

        return call
    number = _SYS_RENAMEAT2.get(platform.machine().lower())
    syscall = getattr(libc, "syscall", None)
    if number is None or syscall is None:
        return None
    syscall.restype = ctypes.c_long

    def call_raw(old: bytes, new: bytes, flags: int) -> int:
        r = syscall(ctypes.c_long(number), ctypes.c_long(AT_FDCWD), ctypes.c_char_p(old),
                    ctypes.c_long(AT_FDCWD), ctypes.c_char_p(new), ctypes.c_long(flags))
        return 0 if r == 0 else ctypes.get_errno()

    return call_raw


def _rename2(old: Path, new: Path, flags: int) -> bool:
    """``renameat2(old, new, flags)``: True when done, False where unavailable (no such call, or the file
    system lacks the flag); other failures raise ``OSError``."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        _RENAMEAT2 = _find_renameat2() or False
    if not _RENAMEAT2:
        return False
    err = _RENAMEAT2(os.fsencode(old), os.fsencode(new), flags)
    if err == 0:
        return True
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM):
        return False  # EPERM: a seccomp filter refusing the call; a real permission problem recurs in the fallback
    raise OSError(err, os.strerror(err), str(old), None, str(new))


def publish(tmp: Path, out: Path, force: bool) -> str:
    """Put the finished ``tmp`` folder at ``out`` in one step; returns how: "renamed", "exchanged", "two renames".

    A new ``out``: ``renameat2(RENAME_NOREPLACE)`` (else a check and ``os.rename``).  An existing one
    (``force``): ``renameat2(RENAME_EXCHANGE)`` swaps the two folders atomically, then the old report, now
    at ``tmp``, is removed; where that is unavailable, ``out`` is renamed to ``.NAME.old-*`` and ``tmp``
    renamed in.  Signals are deferred across each step and the record that it happened (``RUN.published``),
    so an interruption message always matches what is on disk.
    """
    exists = out.exists() or out.is_symlink()
    if exists and not force:
        raise UsageError(f"output folder {show(out)} already exists; pass --force to replace it, or choose another --out")
    if not exists:
        with _Critical():
            try:
                done = _rename2(tmp, out, RENAME_NOREPLACE)
            except FileExistsError:
                done = False
            if not done:
                if out.exists() or out.is_symlink():
                    raise UsageError(f"{show(out)} appeared while the report was being written; not replacing it")
                os.rename(tmp, out)
            _stage("swapped")
            RUN.published = out
        _stage("cleaned")
        return "renamed"
    old, swapped = None, False
    try:
        with _Critical():
            if _rename2(tmp, out, RENAME_EXCHANGE):
                how, old = "exchanged", tmp  # the old report is now at the temporary name
            else:
                how = "two renames"
                aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
                try:
                    os.replace(out, aside / out.name)
                except BaseException:
                    shutil.rmtree(aside, ignore_errors=True)  # still empty
                    raise
                try:
                    os.replace(tmp, out)
                except BaseException:
                    os.replace(aside / out.name, out)  # should this fail, the old report stays in .NAME.old-*
                    shutil.rmtree(aside, ignore_errors=True)
                    raise
                old = aside
            swapped = True
            _stage("swapped")
            RUN.published = out
    finally:
        if swapped:  # also when a signal that arrived during the swap is raised now
            _discard(old)
    _stage("cleaned")
    return how


_WRITE_ERRNOS = {
    errno.ENOSPC: "free some space or choose another --out",
    errno.EDQUOT: "free some space or choose another --out",
    errno.EROFS: "choose an --out on a writable file system",
    errno.EACCES: "choose an --out you may write to",
    errno.EPERM: "choose an --out you may write to",
    errno.EFBIG: "choose another --out",
    errno.EIO: "choose another --out",
    errno.ENAMETOOLONG: "choose a shorter --out",
    errno.EMLINK: "choose another --out",
}


def produce(out: Path, force: bool, write: Callable[[Path], list[str]]) -> list[str]:
    """``write(tmp)`` into a temporary folder beside ``out``, then :func:`publish` it; on any failure or
    interruption the temporary folder is removed (and a file system's refusal is reported as bad input)."""
    tmp = _temp_dir(out)
    try:
        _stage("tmp")
        files = write(tmp)
        _stage("written")
        publish(tmp, out, force)
    except OSError as exc:
        _discard(tmp)
        if exc.errno in _WRITE_ERRNOS and RUN.published is None:
            code = errno.errorcode.get(exc.errno, str(exc.errno))
            raise UsageError(
                f"cannot write the report {show(out)}: {exc.strerror or exc} ({code}); nothing written, the temporary "
                f"folder removed; {_WRITE_ERRNOS[exc.errno]}"
            ) from None
        raise
    except BaseException:
        _discard(tmp)
        raise
    return files


def interrupted_message(prog: str, signum: int) -> str:
    """The one line an interrupted run prints: whether the new report was published, and the signal."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if RUN.published is not None:
        return f"{prog}: interrupted after the new report was published in {show(RUN.published)} ({name})"
    return f"{prog}: interrupted; nothing written ({name})"

