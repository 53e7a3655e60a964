"""The fused kernel's library: loaded only from a private folder, only the bytes its build recorded.

Each test points ``HYPVIZ_CACHE_DIR`` at a folder of its own (a copy of one real build, made once), plants or
breaks something there, and loads afresh (``_load.cache_clear()``): a library planted by someone else, a
truncated one, a FIFO, a library without the kernel's symbol, a folder others can write, a compiler that
hangs or does not exist.  In each case the kernel is rebuilt or refused with a reason, never loaded from
what was planted, and ``compare`` gives the eager path's numbers.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hypviz import attention as att
from hypviz.attention.comparison import fused_stats

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or fused_stats._compiler()[0] is None, reason="the fused kernel is built on Linux with a C++ compiler"
)

# A library that would say "identical" everywhere: its constructor leaves a mark, its kernel returns at once.
EVIL = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void mark(void) {
    const char *p = getenv("HYPVIZ_TEST_MARK"); if (p) { FILE *f = fopen(p, "w"); if (f) { fputs("ran", f); fclose(f); } }
}
extern "C" int hypviz_shared_rows(int a, int b, void *job) { return 0; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One real build: its folder (the library and its digest) and the library's file name."""
    folder = tmp_path_factory.mktemp("built") / "cache"
    env = {**os.environ, "HYPVIZ_CACHE_DIR": str(folder)}
    env.pop("HYPVIZ_FUSED", None)
    code = ("import torch; from hypviz.attention.comparison import fused_stats as f; "
            "print(f.availability(torch.float32, torch.device('cpu'))[0])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "True", out.stderr
    (lib,) = folder.glob("fused_stats-*.so")
    return folder, lib.name


@pytest.fixture
def cache(built, tmp_path, monkeypatch):
    """A private copy of the real build, used by this test's loads; the process's own load restored after."""
    folder = tmp_path / "cache"
    shutil.copytree(built[0], folder)
    monkeypatch.setenv("HYPVIZ_CACHE_DIR", str(folder))
    monkeypatch.setenv("HYPVIZ_TEST_MARK", str(tmp_path / "mark"))
    monkeypatch.delenv("HYPVIZ_FUSED", raising=False)
    fused_stats._load.cache_clear()
    yield folder, folder / built[1]
    fused_stats._load.cache_clear()


def _evil(path: Path) -> None:
    src = path.with_suffix(".cpp")
    src.write_text(EVIL)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(path), str(src)], check=True, timeout=120)
    src.unlink()


def _fresh() -> tuple[bool, str]:
    fused_stats._load.cache_clear()
    return fused_stats.availability(torch.float32, CPU)


def _compare_agrees(points) -> None:
    """compare on the fused path (when the plan takes it) gives the eager path's verdict and TV."""
    q, kk = points(32, 8, 0.8, seed=1, dtype=torch.float32), points(600, 8, 0.8, seed=2, dtype=torch.float32)
    plan = att.plan_compare(q, kk, "spatial", "distance", temperature=3.0, spearman=False)
    eager = att.run_compare(plan.with_path("one_product"))
    ok, _ = fused_stats.availability(torch.float32, CPU)
    if ok:
        fused = att.run_compare(plan.with_path("fused"))
        assert fused.verdict == eager.verdict
        torch.testing.assert_close(fused.tv, eager.tv, rtol=1e-4, atol=1e-6)
    assert float(eager.tv.mean()) > 1e-3  # the maps differ: a kernel saying 0 would be caught


def test_the_real_build_loads_and_records_its_digest(cache, points):
    folder, lib = cache
    ok, why = _fresh()
    assert ok and why.startswith("compiled by"), why
    digest = lib.with_suffix(".sha256").read_text().strip()
    import hashlib

    assert hashlib.sha256(lib.read_bytes()).hexdigest() == digest
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    _compare_agrees(points)


def test_a_library_planted_without_its_builds_digest_is_rebuilt_not_loaded(cache, points):
    folder, lib = cache
    _evil(lib)
    ok, why = _fresh()
    assert ok, why
    assert not Path(os.environ["HYPVIZ_TEST_MARK"]).exists()  # its constructor never ran
    assert lib.read_bytes() != b"" and lib.stat().st_size > 20_000  # the real kernel is back
    _compare_agrees(points)


def test_a_planted_library_with_a_forged_digest_of_another_user_is_not_loaded(cache):
    if os.getuid() != 0:
        pytest.skip("giving files to another user needs root")
    folder, lib = cache
    _evil(lib)
    import hashlib

    digest = lib.with_suffix(".sha256")
    digest.write_text(hashlib.sha256(lib.read_bytes()).hexdigest() + "\n")
    for path in (lib, digest):
        os.chown(path, 65534, 65534)
    ok, why = _fresh()
    assert ok, why  # rebuilt over the planted files, in the user's own folder
    assert not Path(os.environ["HYPVIZ_TEST_MARK"]).exists()
    assert lib.stat().st_uid == os.getuid()


def test_a_folder_others_can_write_is_refused(cache, points):
    folder, lib = cache
    _evil(lib)
    import hashlib

    lib.with_suffix(".sha256").write_text(hashlib.sha256(lib.read_bytes()).hexdigest() + "\n")
    os.chmod(folder, 0o777)
    ok, why = _fresh()
    assert not ok and "writable by others" in why and str(folder) in why, why
    assert not Path(os.environ["HYPVIZ_TEST_MARK"]).exists()
    q, kk = points(4096, 4, 0.5, seed=3), points(4096, 4, 0.5, seed=4)  # 2^24 logits: the plan asks
    plan = att.plan_compare(q, kk, "spatial", "distance", temperature=1.0, spearman=False)
    assert plan.plan.path == "one_product" and "writable by others" in plan.plan.reason
    with pytest.raises(ValueError, match="fused"):
        plan.with_path("fused")


def test_a_truncated_library_is_rebuilt(cache):
    folder, lib = cache
    size = lib.stat().st_size
    with open(lib, "r+b") as f:
        f.truncate(size // 2)
    ok, why = _fresh()  # no SIGBUS: the digest is checked before the library is mapped
    assert ok, why
    assert lib.stat().st_size == size


def test_a_library_without_the_kernel_symbol_is_refused_in_a_line(cache, tmp_path):
    folder, lib = cache
    src = tmp_path / "empty.cpp"
    src.write_text('extern "C" int something_else(void) { return 1; }\n')
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=120)
    import hashlib

    lib.with_suffix(".sha256").write_text(hashlib.sha256(lib.read_bytes()).hexdigest() + "\n")  # the user's own doing
    ok, why = _fresh()
    assert not ok and why.startswith("the fused kernel did not load") and "\n" not in why, why


def test_a_fifo_under_the_librarys_name_does_not_hang(built, tmp_path):
    folder = tmp_path / "cache"
    shutil.copytree(built[0], folder)
    lib = folder / built[1]
    lib.unlink()
    os.mkfifo(lib)
    env = {**os.environ, "HYPVIZ_CACHE_DIR": str(folder)}
    env.pop("HYPVIZ_FUSED", None)
    code = ("import torch; from hypviz.attention.comparison import fused_stats as f; "
            "print(f.availability(torch.float32, torch.device('cpu')))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "True" in out.stdout, out.stderr
    assert stat.S_ISREG(lib.stat().st_mode)


def test_a_hanging_compiler_is_stopped_remembered_and_leaves_nothing(tmp_path, monkeypatch):
    pid_file = tmp_path / "pid"
    cxx = tmp_path / "slow-c++"
    cxx.write_text('#!/bin/sh\ncase "$1" in --version) echo "slow c++ 1.0"; exit 0;; esac\n'
                   f'echo $$ > {pid_file}\nexec sleep 600\n')
    cxx.chmod(0o755)
    folder = tmp_path / "cache"
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("HYPVIZ_CACHE_DIR", str(folder))
    monkeypatch.delenv("HYPVIZ_FUSED", raising=False)
    monkeypatch.setattr(fused_stats, "_COMPILE_TIMEOUT_S", 2)
    try:
        ok, why = _fresh()
        assert not ok and "took more than 2 s" in why, why
        pid = int(pid_file.read_text())
        for _ in range(50):  # killed with its process group (a zombie is reaped by now)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the compiler's process {pid} is still running")
        assert sorted(p.suffix for p in folder.iterdir()) == [".failed"]  # no temporary library left
        pid_file.unlink()
        ok, why = _fresh()  # a later load (another process alike) does not wait again
        assert not ok and "failed to build before" in why and "delete" in why, why
        assert not pid_file.exists()
    finally:
        fused_stats._load.cache_clear()


def test_a_missing_compiler_named_by_cxx_is_said_not_replaced(monkeypatch):
    monkeypatch.setenv("CXX", "/opt/nowhere/clang++")
    monkeypatch.delenv("HYPVIZ_FUSED", raising=False)
    try:
        ok, why = _fresh()
        assert not ok and "CXX='/opt/nowhere/clang++' is not an executable program" in why, why
    finally:
        fused_stats._load.cache_clear()


def test_the_off_switch(monkeypatch, points):
    try:
        monkeypatch.setenv("HYPVIZ_FUSED", "0")
        ok, why = _fresh()
        assert not ok and "HYPVIZ_FUSED=0" in why
        q, kk = points(4096, 4, 0.5, seed=3), points(4096, 4, 0.5, seed=4)  # 2^24 logits: the plan asks
        plan = att.plan_compare(q, kk, "spatial", "distance", temperature=1.0, spearman=False)
        assert plan.plan.path == "one_product" and "HYPVIZ_FUSED=0" in plan.plan.reason
        monkeypatch.setenv("HYPVIZ_FUSED", "yes")
        fused_stats._load.cache_clear()
        with pytest.raises(ValueError, match=r"^HYPVIZ_FUSED must be 0 .* got 'yes'$"):
            fused_stats.availability(torch.float32, CPU)
    finally:
        fused_stats._load.cache_clear()


def test_the_default_folder_is_private_under_any_umask(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPVIZ_CACHE_DIR", str(tmp_path / "a" / "b"))
    old = os.umask(0)
    try:
        folder, why = fused_stats._cache_folder()
    finally:
        os.umask(old)
    assert folder is not None, why
    assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
