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
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from hypviz.base.messages import UsageError, fs_len, show, what_is

__all__ = [
    "MARKER", "PAUSE_ENV", "STAGES", "TMP_EXTRA", "check_out", "publish", "produce", "Interrupted", "RUN",
    "on_signal", "install_handlers", "restore_handlers", "interrupted_message", "resolved_out", "holds", "tmp_prefix",
    "clean_stale", "say", "note", "STALE_AGE_S",
]

MARKER = "metrics.json"  # a folder holding this file, written by hypviz, may be replaced with --force
PAUSE_ENV = "HYPVIZ_TEST_PAUSE_AT"  # tests only: STAGE[:SIGNAL], the command signals itself at that stage
STAGES = ("tmp", "written", "swapped", "cleaned", "finished")  # "finished": the command has returned
TMP_EXTRA = len(".") + len(".tmp-") + 8  # what mkdtemp's ".NAME.tmp-XXXXXXXX" adds to NAME (".old-" is as long),
# where it fits; where not, NAME is cut in the temporary name (tmp_prefix)
STALE_AGE_S = 10.0  # an unlocked temporary folder of this --out older than this is a killed run's, and removed


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


def resolved_out(out: Path) -> Path:
    """``--out`` as the file system reaches it: its parent folder resolved (``os.path.realpath``: symbolic links
    and ``..`` followed as the kernel follows them), its own name kept (a symbolic link there is refused later)."""
    raw = os.fspath(out)
    if not os.path.isabs(raw):
        try:
            raw = os.path.join(os.getcwd(), raw)
        except OSError:  # the current folder was removed: its path is unknown
            raise UsageError(f"the current folder no longer exists; pass an absolute --out instead of {show(raw)}") from None
    head, name = os.path.split(raw.rstrip(os.sep) or os.sep)
    if name in ("", ".", ".."):
        head, name = os.path.split(os.path.realpath(raw))
    return Path(os.path.realpath(head or os.sep)) / name if name else Path(os.sep)


def holds(folder: Path, path: Any) -> bool:
    """Whether removing ``folder`` would remove ``path``: ``folder`` is ``path`` or one of its ancestors, compared on
    resolved paths and on (device, inode) of every ancestor (a bind mount, a second name of the same folder)."""
    real = Path(os.path.realpath(path))
    if real == folder or folder in real.parents:
        return True
    try:
        target = os.stat(folder)
    except OSError:
        return False
    for ancestor in (real, *real.parents):
        try:
            st = os.stat(ancestor)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def tmp_prefix(out: Path, kind: str = "tmp") -> str:
    """The prefix of the temporary folder beside ``out``: ``.NAME.tmp-`` (then 8 random characters), its NAME cut
    (and marked ``~``) where the whole would not fit the file system's limits on a name and a path, so that a
    temporary name fits wherever the final name does."""
    parent = out.parent
    name_max = _pathconf(parent, "PC_NAME_MAX", 255)
    path_max = _pathconf(parent, "PC_PATH_MAX", 4096)
    room = min(name_max, path_max - 2 - fs_len(str(parent))) - 8  # 8: mkdtemp's random part
    full = f".{out.name}.{kind}-"
    if fs_len(full) <= room:
        return full
    cut = out.name
    while cut and fs_len(f".{cut}~.{kind}-") > room:
        cut = cut[:-1]
    return f".{cut}~.{kind}-"


def check_out(out: Path, force: bool, inputs: Sequence[Path] = ()) -> Path:
    """Refuse an output folder that exists (without ``--force``), is not a report, holds an input or the current
    folder (on resolved paths), lies under something that is not a folder, or whose name is too long; returns
    ``--out`` with its parent resolved (:func:`resolved_out`)."""
    out = resolved_out(out)
    if not out.name:
        raise UsageError(f"--out {show(out)} is the root folder; choose a folder to create")
    parent = out.parent
    if not os.path.isdir(parent):
        probe = parent
        while not os.path.lexists(probe) and probe.parent != probe:
            probe = probe.parent
        if os.path.lexists(probe) and not os.path.isdir(probe):
            where = (f"the parent of --out, {show(probe)}," if probe == parent
                     else f"--out {show(out)} lies under {show(probe)}, which")
            raise UsageError(f"{where} is {what_is(probe)}, not a folder; choose an --out inside a folder")
        if os.path.isdir(probe) and not os.access(probe, os.X_OK):
            raise UsageError(f"cannot look inside {show(probe)} (permission denied) for the parent of --out {show(out)}")
        raise UsageError(f"the parent folder of --out does not exist: {show(parent)} (create it first)")
    name_max = _pathconf(parent, "PC_NAME_MAX", 255)
    nbytes = fs_len(out.name)
    if nbytes > name_max:
        shown = show(out.name[:20]) + ("..." if len(out.name) > 20 else "")
        raise UsageError(
            f"--out name too long: {shown} is {nbytes} bytes; the file system allows at most {name_max} per name here"
        )
    path_max = _pathconf(parent, "PC_PATH_MAX", 4096)
    tmp_len = fs_len(str(parent)) + 1 + fs_len(tmp_prefix(out)) + 8
    if max(fs_len(str(out)), tmp_len) >= path_max:
        raise UsageError(f"--out path too long: {fs_len(str(out))} bytes; the file system allows {path_max} per path "
                         f"(and the temporary folder beside it takes {tmp_len})")
    if out.exists() or out.is_symlink():
        if not force:
            raise UsageError(f"output folder {show(out)} already exists; pass --force to replace it, or choose another --out")
        if out.is_symlink() or not out.is_dir():
            raise UsageError(f"--out {show(out)} exists and is {what_is(out) if not out.is_symlink() else 'a symbolic link'}, "
                             "not a folder; not replacing it")
        if os.path.ismount(out):  # renaming it fails (EBUSY): say so before any work
            raise UsageError(f"--force cannot replace {show(out)}: it is a mount point, which cannot be renamed; "
                             "choose an --out inside it or elsewhere")
        if any(out.iterdir()) and not _is_report(out):
            raise UsageError(
                f"--force would replace {show(out)}, which is not a hypviz report (no {MARKER} written by hypviz); "
                "remove it yourself or choose another --out"
            )
        try:
            cwd = os.getcwd()
        except OSError:  # removed: nothing of it is left to lose
            cwd = None
        if cwd is not None and holds(out, cwd):
            raise UsageError(f"--force would replace {show(out)}, which holds the current folder; choose another --out")
        for p in inputs:
            if holds(out, p):
                real = os.path.realpath(p)
                also = f" (that is {show(real)})" if real != os.path.abspath(p) else ""
                raise UsageError(
                    f"--force would replace {show(out)}, which holds the input {show(p)}{also}; copy the input elsewhere first"
                )
    return out


def _temp_dir(out: Path) -> tuple[Path, int | None]:
    """A new temporary folder beside ``out`` (named by :func:`tmp_prefix`) and the descriptor holding its lock
    (``flock``, released by the kernel when this process ends however it ends), or None where locks are unsupported."""
    try:
        tmp = Path(tempfile.mkdtemp(prefix=tmp_prefix(out), dir=out.parent))
    except OSError as exc:
        raise UsageError(f"cannot write into {show(out.parent)}: {exc.strerror or exc}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders; a report is an ordinary folder
    fd = _lock(tmp)
    return tmp, fd if isinstance(fd, int) and fd >= 0 else None


def _lock(path: Path) -> int | bool | None:
    """``flock(LOCK_EX | LOCK_NB)`` on the folder ``path``: its descriptor, False when another process holds the
    lock (a run in progress), None where the lock cannot be taken (no ``fcntl``, a file system without locks)."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:
        os.close(fd)
        return None
    return fd


def _release(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def note(text: str) -> None:
    """One line on stderr, ``hypviz COMMAND: text``, for what the user must know although the run goes on."""
    try:
        print(f"{RUN.prog}: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def clean_stale(out: Path) -> list[Path]:
    """Remove the temporary folders of ``out`` that killed runs left (``.NAME.tmp-*``: unlocked, so their run has
    ended, and older than :data:`STALE_AGE_S`); report on stderr those that may still be in use and the
    ``.NAME.old-*`` folders (a previous report, left by a run killed between its two renames: never removed
    here).  Returns the folders removed."""
    tmp_re = re.compile(re.escape(tmp_prefix(out)) + r"[a-z0-9_]{8}")
    old_re = re.compile(re.escape(tmp_prefix(out, "old")) + r"[a-z0-9_]{8}")
    try:
        names = sorted(os.listdir(out.parent))
    except OSError:
        return []
    removed: list[Path] = []
    unsure: list[Path] = []
    for name in names:
        path = out.parent / name
        if not (tmp_re.fullmatch(name) or old_re.fullmatch(name)) or path.is_symlink() or not path.is_dir():
            continue
        if old_re.fullmatch(name):
            note(f"an earlier run, stopped between its two renames, left the previous report in {show(path)}; "
                 f"move it back or remove it")
            continue
        fd = _lock(path)
        if fd is False:
            continue  # a run in progress writes there
        try:
            try:
                age = time.time() - os.stat(path).st_mtime
            except OSError:
                continue
            if fd is None or age < STALE_AGE_S:
                unsure.append(path)
                continue
            with _Critical():
                shutil.rmtree(path, ignore_errors=True)
            (unsure if os.path.lexists(path) else removed).append(path)
        finally:
            _release(fd if isinstance(fd, int) else None)
    if removed:
        note(f"removed {len(removed)} temporary folder(s) that interrupted runs left beside {show(out)}: "
             + ", ".join(show(p.name) for p in removed[:3]) + (", ..." if len(removed) > 3 else ""))
    if unsure:
        note(f"{len(unsure)} temporary folder(s) of another run, in progress or interrupted, are beside {show(out)}: "
             + ", ".join(show(p.name) for p in unsure[:3]) + (", ..." if len(unsure) > 3 else "")
             + "; remove them once no other hypviz run writes this --out")
    return removed


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
        self.late: int | None = None  # the first signal that arrived once the command had finished
        self.prog = "hypviz"  # how messages begin: "hypviz compare"


RUN = _RunState()


def on_signal(signum: int, frame: Any) -> None:
    """The handler :func:`install_handlers` installs: raise :class:`Interrupted`, or defer it to the end of a step."""
    RUN.delivered += 1
    if RUN.done:
        if RUN.late is None and RUN.signal is None:
            RUN.late = signum  # acted on by the command's last step (hypviz.cli.main): 128 + N and one line
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


def stage(name: str) -> None:
    """Tests only: the hook of :data:`PAUSE_ENV` at stage ``name`` (see :func:`_stage`)."""
    _stage(name)


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


def _discard(path: Path | None, what: str = "") -> bool:
    """Remove a temporary or swapped-out folder, signals deferred until it is gone; True when it is gone.  When it
    cannot be removed and ``what`` names it, one line on stderr says where it is left and why."""
    if path is None:
        return True
    errors: list[BaseException] = []

    def failed(*args: Any) -> None:
        err = args[2]
        errors.append(err[1] if isinstance(err, tuple) else err)

    with _Critical():
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=failed)
        else:
            shutil.rmtree(path, onerror=failed)
    if not os.path.lexists(path):
        return True
    if what:
        reason = next((e.strerror for e in errors if isinstance(e, OSError) and e.strerror), "unknown reason")
        note(f"{what} is left in {show(path)}: it could not be removed ({reason}); remove it yourself")
    return False


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
                aside = Path(tempfile.mkdtemp(prefix=tmp_prefix(out, "old"), dir=out.parent))
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
            _discard(old, "the old report (replaced by the new one)")
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
    errno.EBUSY: "--out is in use (a mount point, or busy); choose an --out inside it or elsewhere",
    errno.EXDEV: "--out crosses a file-system boundary (a mount point?); choose an --out inside it or elsewhere",
}


def produce(out: Path, force: bool, write: Callable[[Path], list[str]]) -> list[str]:
    """``write(tmp)`` into a temporary folder beside ``out``, then :func:`publish` it; on any failure or
    interruption the temporary folder is removed (and a file system's refusal is reported as bad input).
    Temporary folders of ``out`` left by killed runs are removed first (:func:`clean_stale`)."""
    clean_stale(out)
    tmp, lock = _temp_dir(out)
    try:
        _stage("tmp")
        files = write(tmp)
        _stage("written")
        publish(tmp, out, force)
    except OSError as exc:
        _release(lock)
        removed = RUN.published is not None or _discard(tmp, "the unfinished report's temporary folder")
        if exc.errno in _WRITE_ERRNOS and RUN.published is None:
            code = errno.errorcode.get(exc.errno, str(exc.errno))
            where = "the temporary folder removed" if removed else "the temporary folder left (see above)"
            raise UsageError(
                f"cannot write the report {show(out)}: {exc.strerror or exc} ({code}); nothing written, {where}; "
                f"{_WRITE_ERRNOS[exc.errno]}"
            ) from None
        raise
    except BaseException:
        _release(lock)
        if RUN.published is None:
            _discard(tmp, "the unfinished report's temporary folder")
        raise
    _release(lock)
    return files


def say(text: str) -> None:
    """Print the summary of a published report on stdout.  A stdout that fails (closed by ``| head``, a full disk,
    ``>/dev/full``) changes nothing on disk: one line on stderr says that the report is complete, stdout is
    silenced (so that Python's own flush at exit cannot fail again) and the run still succeeds."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError) as exc:  # ValueError: stdout closed; AttributeError: no stdout (None)
        _silence_stdout()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "stdout is closed"
        where = f" in {show(RUN.published)}" if RUN.published is not None else ""
        note(f"the report{where} is complete; its summary could not be printed on stdout ({reason})")


def _silence_stdout() -> None:
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return  # not a file (captured in a test): nothing will be flushed to a descriptor at exit
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass


def interrupted_message(prog: str, signum: int) -> str:
    """The one line an interrupted run prints: whether the new report was published, and the signal."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if RUN.published is not None:
        return f"{prog}: interrupted after the new report was published in {show(RUN.published)} ({name}); the report is complete"
    return f"{prog}: interrupted; nothing written ({name})"

