"""benchmarks/gpu.py, the prepared GPU run, exercised on the CPU in dry-run mode (CI has no GPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hypviz import attention

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu.py"


def test_dry_run_checks_and_rewrites_only_the_gpu_section(tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\n## 4. Before\n\nkept\n\n## 5. GPU\n\nnot measured\n\n## 6. After\n\nkept too\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--md", str(md)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "checks passed" in proc.stdout
    text = md.read_text()
    assert "## 4. Before\n\nkept" in text and "## 6. After\n\nkept too" in text and "not measured" not in text
    # per dtype: every kind's map, two streamed comparisons, the linear distance attention's output, the top-key search
    assert text.count("(checked)") == 2 * (len(attention.KINDS) + 4) and "**Dry run**" in text
    assert "exact_top_keys float32" in text and "| 512 | 125 |" in text  # issue 30's rows at the dry run's size
    assert "`distance_linear_attention` (features=64" in text
    assert "| sampled (rows=) |" in text and "fraction of `torch.mm` throughput" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the full run would start")
def test_without_cuda_the_full_run_refuses_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--md", str(tmp_path / "x.md")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "use --dry-run" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.md").exists()
