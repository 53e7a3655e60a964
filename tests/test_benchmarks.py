"""benchmarks/run.py (measurement) and benchmarks/report.py (results dict -> Markdown), issues 14 and 15."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"
REPORT = ROOT / "benchmarks" / "report.py"
VERDICT = re.compile(r"^\*\*(met|NOT met|not measured|no floor)\*\*: ")
SECTIONS = ("matmul_floor", "geoopt", "compare_vs_maps", "compare_large", "compare_sampled", "linear", "gpu", "linear_distance",
            "topk_tail", "topk_index")


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", REPORT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _sections(md: str) -> dict[int, list[str]]:
    """``{number: lines under the heading}`` for the numbered sections."""
    out: dict[int, list[str]] = {}
    cur = None
    for line in md.splitlines():
        m = re.match(r"^## (\d+)\. ", line)
        if m:
            cur = int(m.group(1))
            out[cur] = []
        elif line.startswith("## "):
            cur = None
        elif cur is not None:
            out[cur].append(line)
    return out


def _verdicts(md: str) -> dict[int, str]:
    """Each numbered section's verdict: its first non-empty line must be the verdict line."""
    out = {}
    for number, lines in _sections(md).items():
        first = next(line for line in lines if line.strip())
        m = VERDICT.match(first)
        assert m, f"section {number} does not open with its verdict line: {first!r}"
        out[number] = m.group(1)
    return out


def test_scripts_import_hypviz_without_a_sys_path_hack():
    for script in ("run.py", "report.py", "gpu.py"):
        text = (ROOT / "benchmarks" / script).read_text(encoding="utf-8")
        assert "sys.path.insert" not in text and "sys.path.append" not in text
    # report.py measures nothing
    assert "import torch" not in REPORT.read_text(encoding="utf-8")


def test_quick_run_writes_results_and_markdown(tmp_path):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    proc = subprocess.run([sys.executable, str(RUN), "--quick", "--json", str(js), "--md", str(md)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(js.read_text(encoding="utf-8"))
    assert results["quick"] is True and all(key in results for key in SECTIONS)
    text = md.read_text(encoding="utf-8")
    assert text == _report().render(results)  # the Markdown is the writer's rendering of the JSON

    # the machine is named, at the top and in its table
    cpu = results["machine"]["cpu"]
    try:
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
    except OSError:
        names = []
    if names:
        assert cpu == names[0]
    assert f"Measured on **{cpu}" in text.splitlines()[2] and f"| CPU | {cpu}" in text
    assert "**Quick run**" in text

    # every section opens with its verdict line, and the verdict table repeats it
    verdicts = _verdicts(text)
    assert sorted(verdicts) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    for number, v in verdicts.items():
        assert re.search(rf"^\| {number}\. .*\| \*\*{re.escape(v)}\*\* \|$", text, re.MULTILINE), number
    assert verdicts[6] == "no floor"
    assert all(verdicts[n] in ("met", "NOT met") for n in (1, 3, 4, 5))
    assert verdicts[7] == ("not measured" if results["gpu"] is None else verdicts[7])

    # the new sections: ratio first, the fraction of matmul throughput, memory in a fresh process
    sec = {n: "\n".join(lines) for n, lines in _sections(text).items()}
    head3 = next(line for line in text.splitlines() if line.startswith("## 3. "))
    assert "against the two dense `attention_map` calls" in head3
    first3 = sec[3].strip().splitlines()[0]
    assert re.search(r"`compare\(\)` takes \d+\.\d\dx the time of the two calls \(medians; \d+\.\d\dx by minima\)", first3)
    assert "of the matmul throughput" in first3 and "counting two products" in first3
    c3 = results["compare_vs_maps"]
    assert c3["ratio_median"] > 0 and 0 < c3["fraction_of_mm"] and c3["max_abs_tv_difference"] < 1e-5
    for n, key in ((4, "compare_large"), (5, "compare_sampled")):
        c = results[key]
        assert c["peak_extra_rss_bytes_sampled"] >= 0 and c["mm"]["time_s"] > 0 and c["fraction_of_mm"] > 0
        assert "peak extra memory" in sec[n].strip().splitlines()[0] and "fraction of matmul throughput" in sec[n]
    assert results["compare_sampled"]["rows"] == 1024 and results["compare_sampled"]["n"] == 20_000
    assert "rows=1024, seed=0" in sec[5]
    # 8: linear distance attention, each size in a subprocess, its error from compare(rows=) on the same features
    ld = results["linear_distance"]
    assert [r["n"] for r in ld["rows"]] == [2_000, 5_000] and all(r["rows"] == 32 and r["output_finite"] for r in ld["rows"])
    assert all(r["peak_extra_rss_bytes_sampled"] >= 0 and r["time_s"] > 0 and 0 <= r["ratio"] for r in ld["rows"])
    assert verdicts[8] in ("met", "NOT met") and "TV / baseline" in sec[8]
    # 9: top keys plus a fitted tail, each size and sharpness in a subprocess, next to the exact streamed map
    tt = results["topk_tail"]
    assert [(r["n"], r["sharpness"]) for r in tt["rows"]] == [(1_000, 1.25), (1_000, 125.0)]
    for r in tt["rows"]:
        assert r["kind"]["output_finite"] and r["exact"]["time_s"] > 0
        assert r["kind"]["min_weight"] is None or r["kind"]["min_weight"] >= 0  # None: every row weighted by the tail alone
        assert 0 <= r["error"]["ratio"] and r["error"]["rows_over_bar_flagged"] <= r["error"]["rows_over_bar"]
        assert "recall_rows" in r["search"] or "skipped" in r["search"] or r["search"]["reason"]
    assert verdicts[9] in ("met", "NOT met") and "exact streamed map" in sec[9]
    # 10: the kind with the index search on Gaussian, clustered and tree keys, every row, next to the exact map
    ti = results["topk_index"]
    assert [(r["set"], r["scale"]) for r in ti["rows"]] == [("gaussian", 1.25), ("clusters", 125.0), ("tree", 1.0)]
    for r in ti["rows"]:
        assert r["kind"]["output_finite"] and r["exact"]["time_s"] > 0 and r["n"] in (1_023, 1_024)
        assert 0 <= r["error"]["ratio"] and 0 <= r["error"]["top1_agreement"] <= 1
    assert verdicts[10] in ("met", "NOT met") and "search=\"index\"" in sec[10]


def _machine() -> dict:
    return {"cpu": "Test CPU 9000", "logical_cpus": 2, "torch_threads": 2, "cpu_capability": "AVX2",
            "memory_total_gib": 8.0, "python": "3.11", "torch": "2.x", "geoopt": None, "gpu": None,
            "date_utc": "2026-01-01 00:00"}


def _timing(median: float, low: float) -> dict:
    return {"median_s": median, "min_s": low, "q1_s": low, "q3_s": median, "repeats": 3}


def _child(n: int, rows: int, time_s: float, peak: int, **extra) -> dict:
    return {"n": n, "m": n, "d": 64, "rows": rows, "device": "cpu", "threads": 2, "time_s": time_s,
            "inputs_bytes": 2 * n * 65 * 4, "peak_extra_rss_bytes_hwm": peak, "peak_extra_rss_bytes_sampled": peak - 1,
            "block_rows": 22, "n_blocks": 187, "dense_map_bytes": 4 * rows * n, "all_bounds_met": True,
            "mm": {"block_rows": 512, "scale": rows / 512, "repeats": 3, "block_median_s": 0.1, "time_s": 0.1 * rows / 512,
                   "full_output_bytes": 4 * rows * n},
            "fraction_of_mm": 0.8 / time_s, "fraction_of_mm_2": 1.6 / time_s, "floor_bytes": 2**30,
            "summary": {"mean_tv": 0.1, "mean_tv_uniform_b": 0.2, "verdict": "different",
                        "ci95": {"tv": [0.099, 0.101]} if rows < n else None}, **extra}


def test_report_renders_a_hand_made_minimal_results_dict():
    rep = _report()
    names = {"compare": "compare(...)", "maps": "two maps", "mm": "torch.mm"}
    results = {
        "machine": _machine(),
        "quick": False,
        "compare_vs_maps": {
            "n": 16384, "m": 16384, "d": 64, "threads": 2, "names": names,
            "results": {names["compare"]: _timing(0.8, 0.75), names["maps"]: _timing(1.0, 0.9), names["mm"]: _timing(0.4, 0.38)},
            "ratio_median": 0.8, "ratio_min": 0.75 / 0.9, "fraction_of_mm": 0.5, "fraction_of_mm_2": 1.0,
            "mm_flops": 8.6e10, "floor_ratio": 1.0, "max_abs_tv_difference": 1e-8,
            "summary": {"mean_tv": 0.1, "mean_tv_uniform_b": 0.2, "verdict": "different"},
        },
        "compare_large": _child(65536, 65536, 24.0, 200 * 2**20, floor_time_s=25.0),
        "compare_sampled": _child(1_000_000, 4096, 30.0, int(1.2 * 2**30), floor_time_s=60.0),
        "gpu": None,
    }
    text = rep.render(results)
    assert "Measured on **Test CPU 9000, 2 logical CPUs**" in text and "**Quick run**" not in text
    verdicts = _verdicts(text)
    assert verdicts == {1: "not measured", 2: "not measured", 3: "met", 4: "met", 5: "NOT met", 6: "not measured",
                        7: "not measured", 8: "not measured", 9: "not measured", 10: "not measured"}
    sec = {n: "\n".join(lines) for n, lines in _sections(text).items()}
    assert "**met**: `compare()` takes 0.80x the time of the two calls (medians; 0.83x by minima); 50% of the matmul" in sec[3]
    assert "**NOT met**: 30 s (met), peak extra memory 1.2 GiB (NOT met)" in sec[5]
    assert "scaled by 8: the full product's output would take 15.3 GiB" in sec[5]
    assert "| 5. sampled `compare()` |" in text and "[0.099, 0.101]" in sec[5]
    assert "no GPU available in this session" in sec[7]


def test_compare_sections_read_the_time_against_the_same_shape_matmul():
    # sections 4 and 5 with their matmul floor: the ratio comes first, has its own row, and decides the verdict
    rep = _report()
    at_65k = _child(65536, 65536, 9.0, 200 * 2**20, floor_time_s=25.0, floor_ratio_mm=2.5)
    at_65k["mm"]["time_s"] = 4.0  # 2.25x: met
    sampled = _child(1_000_000, 4096, 30.0, 400 * 2**20, floor_time_s=60.0, floor_ratio_mm=2.5)
    sampled["mm"]["time_s"] = 10.0  # 3.00x: NOT met, though time and memory are met
    sampled["machine"] = _machine()
    text = rep.render({"machine": _machine(), "quick": False, "compare_large": at_65k, "compare_sampled": sampled})
    verdicts = _verdicts(text)
    assert verdicts[4] == "met" and verdicts[5] == "NOT met"
    sec = {n: "\n".join(lines) for n, lines in _sections(text).items()}
    assert "**met**: 2.25x the same-shape matmul (met); 9 s (met)" in sec[4]
    assert "**NOT met**: 3.00x the same-shape matmul (NOT met); 30 s (met), peak extra memory 400 MiB (met)" in sec[5]
    assert "| ratio: time of `compare()` / time of the same-shape `torch.mm` (floor at most 2.5x) | 3.00x: NOT met |" in sec[5]
    assert "Floor: at most 2.5x the same-shape `torch.mm`, under 60 s" in sec[5]
    assert "run.py --only compare`" in sec[5] and "--only compare" not in sec[4]  # where it was measured, when apart


def test_linear_distance_section_reads_each_size_against_the_bar():
    rep = _report()

    def row(n, ratio):
        return {"n": n, "time_s": 1e-5 * n, "peak_extra_rss_bytes_hwm": 300 * n, "peak_extra_rss_bytes_sampled": 290 * n,
                "dense_map_bytes": 4 * n * n, "rows": 64, "mean_tv": ratio * 0.008, "mean_tv_uniform_b": 0.008,
                "ratio": ratio, "top1_agreement": 0.6, "error_time_s": 0.5}

    ld = {"d": 64, "temperature": 8.0, "mean_norm": 1.0, "features": 64, "rows_sampled": 64, "floor_ratio": 0.25}
    good = rep.render({"machine": _machine(), "quick": False, "gpu": None,
                       "linear_distance": {**ld, "rows": [row(10_000, 0.2), row(1_000_000, 0.21)]}})
    bad = rep.render({"machine": _machine(), "quick": False, "gpu": None,
                      "linear_distance": {**ld, "rows": [row(10_000, 0.2), row(1_000_000, 0.3)]}})
    assert _verdicts(good)[8] == "met" and _verdicts(bad)[8] == "NOT met"
    sec = "\n".join(_sections(good)[8])
    assert "at N = M = 1,000,000: 10 s" in sec and "TV / baseline 0.21 on 64 sampled rows" in sec
    assert "| 1,000,000 | 10 s |" in sec and "3.73e+03 GiB" in sec and "GPU: not measured" in sec
    assert "| 8. linear distance attention |" in good


def test_topk_tail_section_reads_the_largest_size_against_the_issues_bars():
    rep = _report()

    def row(n, sharp, ratio, kind_s, exact_s, over=0, flagged=0):
        return {"n": n, "sharpness": sharp, "kind": {"search": "index", "recall": 0.95, "time_s": kind_s,
                                                      "peak_extra_rss_bytes_sampled": 2**20, "mean_top_count": 20.0},
                "exact": {"time_s": exact_s},
                "error": {"mean_tv": ratio * 0.5, "mean_tv_uniform": 0.5, "ratio": ratio, "top1_agreement": 1.0,
                          "rows_met": 1.0, "estimate_covers": 1.0, "rows_over_bar": over, "rows_over_bar_flagged": flagged},
                "search": {"method": "hnsw(buckets=1, ef=32, neighbours=32)", "time_s": 2.0, "recall_sampled": 0.95,
                           "sample": 256, "reason": None, "recall_rows": 0.94}}

    tt = {"d": 64, "temperature": 8.0, "top": 16, "recall": 0.9, "sample": 256, "exact_rows": 2048, "rows_sampled": 64,
          "floor_ratio_smooth": 0.02, "floor_ratio_sharp": 0.1, "floor_time_fraction": 0.1}
    good = [row(10_000, 1.25, 0.5, 1.0, 1.0), row(10**6, 1.25, 0.01, 5.0, 100.0), row(10**6, 12.5, 0.3, 5.0, 100.0, 3, 3),
            row(10**6, 125, 0.05, 5.0, 100.0)]

    def render(rows):
        return rep.render({"machine": _machine(), "quick": False, "gpu": None, "topk_tail": {**tt, "rows": rows}})

    assert _verdicts(render(good))[9] == "met"  # the small size's miss does not count: the bar is at the largest N
    for i, bad in ((1, row(10**6, 1.25, 0.01, 20.0, 100.0)), (1, row(10**6, 1.25, 0.03, 5.0, 100.0)),
                   (2, row(10**6, 12.5, 0.3, 5.0, 100.0, 3, 2)), (3, row(10**6, 125, 0.2, 5.0, 100.0))):
        assert _verdicts(render(good[:i] + [bad] + good[i + 1:]))[9] == "NOT met"
    sec = "\n".join(_sections(render(good))[9])
    assert "| 1,000,000 | 125 | 5 s (index) |" in sec and "0.05x" in sec and "recall 0.95 on 256 sampled queries" in sec


def test_topk_index_child_at_a_tiny_size():
    # one tree key set (255 keys, 254 queries) through the subprocess entry point: the kind with the index search,
    # the exact map, the error and the recall on sampled rows
    proc = subprocess.run([sys.executable, str(RUN), "--child-topk-index", "tree", "1.0", "256", "16"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["n"] == 255 and r["m"] == 256 and r["rows"] == 16 and "H^64, edge 1" in r["how"]
    assert r["kind"]["output_finite"] and abs(r["kind"]["rows_met"] + r["kind"]["rows_estimated"] - 1.0) < 1e-12
    assert r["exact"]["time_s"] > 0
    assert "exact search (fallback)" in r["kind"]["search"]  # 256 keys: too few for an index, and it says so
    assert r["error"]["ratio"] <= 0.25 and r["error"]["top1_agreement"] >= 0.9


def test_topk_index_section_holds_every_key_set_to_the_bar():
    rep = _report()

    def row(how, ratio, top1, search="hnsw(buckets=1, ef=32, neighbours=32): top-256 recall 0.95 on 256 sampled queries "
                                     "(asked 0.9)"):
        return {"set": "gaussian", "scale": 125.0, "how": how, "n": 16384, "load_average": [3.5, 3.0, 2.0],
                "kind": {"search": search, "time_s": 2.0, "rows_met": 0.75, "rows_estimated": 0.25, "exact_rows": 0.0,
                         "tail_only_rows": 0.5,
                         "mean_top_count": 20.0},
                "exact": {"time_s": 4.0},
                "error": {"ratio": ratio, "top1_agreement": top1, "recall_rows": 0.97}}

    ti = {"n": 16384, "d": 64, "temperature": 8.0, "recall": 0.9, "clusters": 32, "cluster_spread": 0.3, "rows_sampled": 512,
          "floor_ratio": 0.25, "floor_top1": 0.9}

    def render(rows):
        return rep.render({"machine": _machine(), "quick": False, "gpu": None, "topk_index": {**ti, "rows": rows}})

    good = [row("lifted Gaussian (r^2/tau = 125)", 0.01, 1.0), row("tree, edge 1", 0.2, 0.95, "exact search (fallback): "
                                                                   "no index reached recall 0.9 on 256 sampled queries")]
    assert _verdicts(render(good))[10] == "met"
    assert _verdicts(render([good[0], row("tree", 0.3, 0.95)]))[10] == "NOT met"
    assert _verdicts(render([good[0], row("tree", 0.1, 0.85)]))[10] == "NOT met"
    sec = "\n".join(_sections(render(good))[10])
    assert "| lifted Gaussian (r^2/tau = 125) | 16,384 | 2 s | 4 s | 0.5x | 0.01 (met) | 1 |" in sec
    assert "top-256 recall 0.95 on 256 (asked 0.9)" in sec and "exact (no index reached recall 0.9 on 256 sampled queries)" in sec
    assert "| 0.75 proven, 0.25 estimated |" in sec  # rows met by their bound, and by the estimate only
    old = {**good[0], "kind": {k: v for k, v in good[0]["kind"].items() if k != "rows_estimated"}}  # measured before the bound
    assert "| 0.75 (by the estimate: measured before met was proven) |" in "\n".join(_sections(render([old]))[10])


def test_replace_gpu_section_keeps_the_rest_and_updates_the_verdict_row():
    rep = _report()
    doc = rep.render({"machine": _machine(), "quick": False, "gpu": None}) + "## After\n\nkept\n"
    gpu = {
        "device_name": "Test GPU", "checks": ["a check (checked)"], "dry": False,
        "results": {
            "mm": {"n": 8192, "d": 64, "time_s": 1e-3, "flops": 8.6e12},
            "kernels": {"lorentz.pairwise_sqdist": 1.5, "attention.attention_map spatial": 1.2},
            "vs_maps": {"n": 16384, "compare_s": 0.02, "maps_s": 0.03, "mm_s": 0.005, "ratio": 2 / 3},
            **{label: {"n": n, "rows": rows, "time_s": 1.0, "mm_time_s": 0.5, "fraction_of_mm": 0.5,
                       "fraction_of_mm_2": 1.0, "mean_tv": 0.1, "mean_tv_uniform_b": 0.2}
               for label, n, rows in (("compare", 65536, 65536), ("compare_big", 10**6, 10**6),
                                      ("compare_sampled", 10**6, 4096))},
        },
    }
    new = rep.replace_gpu_section(doc, rep.gpu_section(gpu))
    assert new.count("## 7. GPU") == 1 and new.endswith("## After\n\nkept\n")
    assert new.split("## 7. GPU")[0].replace(re.search(r"^\| 7\. GPU \|.*$", new, re.MULTILINE).group(0), "") == \
        doc.split("## 7. GPU")[0].replace(re.search(r"^\| 7\. GPU \|.*$", doc, re.MULTILINE).group(0), "")
    assert _verdicts(new)[7] == "met" and re.search(r"^\| 7\. GPU \|.*\| \*\*met\*\* \|$", new, re.MULTILINE)
    assert "Device: Test GPU." in new and "| sampled (rows=) | 1,000,000 | 4,096 |" in new
    assert "| GPU | none available in this session |" in new  # the machine table is left alone
    # a file without a GPU heading gets the section appended
    assert rep.replace_gpu_section("# B\n", rep.gpu_section(None)).startswith("# B\n\n## 7. GPU\n\n**not measured**")


@pytest.mark.parametrize("argv", [[], ["only-one"]])
def test_report_cli_usage(argv):
    assert _report().main(argv) == 2
