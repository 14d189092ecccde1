"""The HTML report: self-contained, every chart drawn; rendered in headless Chromium when it is installed."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from html import unescape
from pathlib import Path

import pytest

from solbench.report.html import render_report, speedup_class
from solbench.report.merge import merge
from solbench.spec.trace import Status
from tests.report.conftest import make_trace, sample_traces, sol

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                                                             "(Debian: apt-get install -y chromium)")


def test_page_has_every_chart_and_fetches_nothing():
    traces = sample_traces()
    page = render_report(merge(traces))
    charts = re.findall(r'<svg class="chart" data-chart="([a-z-]+)"', page)
    assert charts.count("sol-histogram") == 1 and charts.count("speedup") == 1
    assert charts.count("roofline") == len({t.definition for t in traces})
    passed = [t for t in traces if t.status == Status.PASSED]
    filled = len(re.findall(r'<circle class="point"', page))
    hollow = len(re.findall(r'<circle class="point ref"', page))
    assert filled == len(passed) and hollow == len({t.workload_uuid for t in passed})
    assert page.count('class="bar"') >= 5 and 'class="bar failed"' in page
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page) and "<script" not in page
    assert "INCORRECT_NUMERICAL" in page and "max abs error 0.5" in page


def test_missing_sol_analysis_reads_n_a():
    page = render_report(merge([make_trace(sol=None)]))
    assert "no SOL scores in these traces (n/a)" in page and "no T_SOL for these workloads (n/a)" in page
    assert page.count('data-chart="speedup"') == 1 and 'class="point"' not in page


def test_flagged_numerics_are_listed_and_counted():
    traces = [make_trace(uuid="w0", flags=["systematic_bias"]), make_trace(uuid="w1")]
    page = render_report(merge(traces))
    assert "Flagged numerics" in page and '<td class="flagged">1</td>' in page
    assert "<b>systematic_bias</b> rmsnorm / fast" in page and "numerics flagged: y: details" in page
    assert "No flagged numerics." in render_report(merge([make_trace()]))


def cpu_traces() -> list:
    """A CPU run as the README's main job leaves it: B200 bounds recorded, latencies not scored, skips."""
    traces = []
    for i, n in enumerate((1, 7)):
        bound = {**sol(0.004 * n, 0.3 * n), "score": None, "log_score": None, "hw": "B200",
                 "unscored": "measured on the CPU: T_SOL is the bound on B200 (no GPU here and no --hw)"}
        traces.append(make_trace("rmsnorm_h4096", "torch_rmsnorm", f"w{i}", latency_ms=0.3 * n, sol=bound,
                                 hardware="cpu", axes={"num_tokens": n}))
        traces.append(make_trace("rmsnorm_h4096", "triton_rmsnorm", f"w{i}", status="SKIPPED", hardware="cpu",
                                 axes={"num_tokens": n}, log="Triton's CPU interpreter computes bfloat16 "
                                                            "arithmetic wrongly; this solution can only be judged on a GPU"))
    return traces


def test_cpu_run_charts_the_bounds_and_says_why_nothing_is_scored():
    page = render_report(merge(cpu_traces()))
    assert len(re.findall(r'<circle class="point"', page)) == 2  # the roofline chart is not empty
    assert "bound on B200" in page and "latencies are not scored" in page
    assert "CPU latencies are not scored (see above)" in page  # the empty histogram says why
    assert "rmsnorm_h4096 / triton_rmsnorm (2 workload(s)): Triton&#x27;s CPU interpreter" in page  # skips say why


def test_conflicts_are_shown():
    traces = [make_trace(), make_trace(status="TIMEOUT", timestamp="2026-09-09")]
    page = render_report(merge(traces))
    assert "1 conflicting duplicate(s)" in page and "TIMEOUT" in page


def png_ink_fraction(path: Path) -> float:
    """Fraction of decompressed image bytes that differ from the most common one (0 for a blank page)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    idat, pos = b"", 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    counts = [0] * 256
    for b in raw[::7]:
        counts[b] += 1
    return 1 - max(counts) / sum(counts)


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", *args], capture_output=True, text=True, timeout=120)


@needs_chromium
def test_rendered_in_chromium(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_report(merge(sample_traces()), sources=["sample.jsonl"]))
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    shots = {}
    for name, html in (("report", page), ("blank", blank)):
        shots[name] = tmp_path / f"{name}.png"
        result = chromium("--window-size=1400,1800", f"--screenshot={shots[name]}", html.as_uri())
        assert shots[name].is_file(), result.stderr[-2000:]
    assert shots["report"].stat().st_size > 5 * shots["blank"].stat().st_size
    assert png_ink_fraction(shots["report"]) > 0.02 and png_ink_fraction(shots["blank"]) < 0.001
    dom = chromium("--dump-dom", page.as_uri()).stdout
    assert len(re.findall(r"<svg[^>]*class=\"chart\"", dom)) == 4  # histogram, speedup, two rooflines
    assert len(re.findall(r'<circle class="point', dom)) >= 16 and len(re.findall(r"<rect class=\"bar", dom)) >= 5
    assert "<table class=\"leaderboard\"" in dom


WIDTH_PROBE = """<script>
const tables = [...document.querySelectorAll("table.leaderboard")].map(t => ({
    table: Math.ceil(t.getBoundingClientRect().width), box: t.parentElement.clientWidth,
    scroll: t.parentElement.scrollWidth}));
document.body.setAttribute("data-probe", JSON.stringify({inner: window.innerWidth,
    page: document.documentElement.scrollWidth, tables}));
</script>"""


def probed(tmp_path: Path, long_problem: str, long_solution: str, script: str, attribute: str, width: int) -> dict:
    """The sample report plus three workloads of a long-named problem and solution, laid out by Chromium at
    `width` px; what `script` measured there (JSON in the body's `attribute`)."""
    traces = sample_traces() + [
        make_trace(long_problem, long_solution, f"w{i}", latency_ms=1.0 + i, sol=sol(0.2, 1.0 + i),
                   axes={"batch_size": 2 ** i}) for i in range(3)]
    page = render_report(merge(traces), sources=["sample.jsonl"]).replace("</body>", script + "</body>")
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(page)
    dom = chromium(f"--window-size={width},1800", "--dump-dom", probe_page.as_uri()).stdout
    found = re.search(rf'{attribute}="([^"]*)"', dom)
    assert found, dom[-2000:]
    return json.loads(unescape(found.group(1)))


@needs_chromium
def test_leaderboard_fits_1400_px_without_sideways_scrolling(tmp_path):
    """Long generated names (as `solbench extract` writes them) and every column: the table wraps its
    headers and names instead of scrolling; measured by Chromium's layout at a 1400 px window."""
    long_problem = ("decoder_layer_decode_mla_hs7168_h128_qr1536_kvr512_nope128_rope64_v128_ropeinterleave_"
                    "scale0p135234_moe_sigmoid_grouped_e256_k8_i2048_shared2048_eps1e-06")
    probe = probed(tmp_path, long_problem, "triton_fused_decoder_layer_with_a_long_descriptive_name", WIDTH_PROBE,
                   "data-probe", 1400)
    assert probe["inner"] == 1400 and probe["tables"], probe
    for table in probe["tables"]:
        assert table["scroll"] <= table["box"] and table["table"] <= table["box"], probe
    assert probe["page"] <= 1400, probe


CLIP_PROBE = """<script>
const clipped = [];
for (const chart of document.querySelectorAll("svg.chart")) {
  const box = chart.getBoundingClientRect();
  if (box.left < -0.5 || box.right > window.innerWidth + 0.5) clipped.push({chart: chart.dataset.chart, box: [box.left, box.right]});
  for (const text of chart.querySelectorAll("text")) {
    const r = text.getBoundingClientRect();
    if (r.width && (r.left < box.left - 0.5 || r.right > box.right + 0.5))
      clipped.push({text: text.textContent, left: r.left - box.left, right: box.right - r.right});
  }
}
document.body.setAttribute("data-clip", JSON.stringify({inner: window.innerWidth, texts:
  document.querySelectorAll("svg.chart text").length, clipped}));
</script>"""


@needs_chromium
@pytest.mark.parametrize("width", [1400, 800])
def test_no_chart_label_or_title_is_clipped_in_a_browser(tmp_path, width):
    """Long problem and solution names (the speedup chart's "problem · solution" labels, each problem's
    chart title): every text of every chart lies inside its chart, and every chart inside the window."""
    long_problem = "attention_softmax_dropout_value_matmul_backward_h32_d128_causal"
    probe = probed(tmp_path, long_problem, "triton_fused_attention_backward_with_a_long_descriptive_name", CLIP_PROBE,
                   "data-clip", width)
    assert probe["inner"] == width and probe["texts"] > 50, probe
    assert probe["clipped"] == [], probe


def test_speedups_are_coloured_only_where_their_interval_excludes_one_and_single_problem_rows_are_bold():
    def row(speedup: float, low: float, high: float) -> dict:
        return {"geomean_speedup_vs_reference": speedup, "geomean_latency_ms": 1.0, "latency_ci_low_ms": low,
                "latency_ci_high_ms": high}

    assert speedup_class(1.0, row(1.0, 0.98, 1.02)) == ""  # 1.00x: neither red nor green
    assert speedup_class(0.99, row(0.99, 0.98, 1.02)) == ""  # below 1 but within the noise
    assert speedup_class(1.5, row(1.5, 0.98, 1.02)) == "good" and speedup_class(0.5, row(0.5, 0.98, 1.02)) == "bad"
    assert speedup_class(1.5, {"geomean_latency_ms": 1.0}) == ""  # no interval: no colour
    page = render_report(merge(sample_traces()))
    board = page[page.index('<table class="leaderboard"'):page.index("</table>")]
    # sample_traces: triton_fast solves both problems (a summary row); the others one each (their one row,
    # bold, is their summary: none repeated)
    summaries = re.findall(r'<tr class="summary"><td class="text">([^<]*)</td>', board)
    assert sorted(summaries) == ["cuda_broken", "reference_gemm_bf16", "reference_rmsnorm_h4096", "triton_fast"]
    assert board.count("<tr") == 1 + 5 + 1  # header, 5 problem rows, triton_fast's summary
    assert 'title="not coloured: within the measured noise' in board
    # triton_fast is faster beyond the noise on both of its problems: its summary's speedup is green too
    summary = re.search(r'<tr class="summary"><td class="text">triton_fast</td>.*?</tr>', board).group(0)
    assert '<td class="good">3.12x</td>' in summary
