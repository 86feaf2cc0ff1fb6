// Benchmark charts with uPlot: a run's TTFT timeline and distribution, a schedule's trend, or a
// sweep's prefill and decode charts (points and Pareto front of each run compared).
(function () {
  const script = document.currentScript;
  const url = script.dataset.url;
  const kind = script.dataset.kind;
  const charts = {};

  function draw(id, data, series, xTime, axes) {
    const el = document.getElementById(id);
    if (!el) return;
    el.dataset.points = data[0].length;
    if (charts[id]) { charts[id].setData(data); return; }
    const options = {
      width: el.clientWidth || 480, height: 220,
      scales: { x: { time: xTime } },
      series: [axes ? { label: axes[0].label } : {}].concat(series),
    };
    if (axes) options.axes = axes;
    charts[id] = new uPlot(options, data, el);
  }

  const dotSeries = (label, stroke) => ({ label, stroke, width: 0, points: { show: true, size: 4, fill: stroke } });

  function drawRun(d) {
    draw("chart-timeline", [d.start_s, d.ttft_ms], [dotSeries("TTFT ms", "#2b6cb0")], false);
    const sorted = d.ttft_ms.slice().sort((a, b) => a - b);
    const pct = sorted.map((_, i) => (sorted.length > 1 ? (100 * i) / (sorted.length - 1) : 100));
    draw("chart-distribution", [pct, sorted], [{ label: "TTFT ms", stroke: "#b7791f", width: 2 }], false);
  }

  function drawTrend(d) {
    draw("chart-ttft", [d.t, d.ttft_p50_ms], [{ label: "TTFT p50 ms", stroke: "#2b6cb0", width: 2, points: { show: true } }], true);
    draw("chart-tps", [d.t, d.output_tokens_per_s], [{ label: "tokens/s", stroke: "#137333", width: 2, points: { show: true } }], true);
  }

  const PALETTE = ["#2b6cb0", "#c05621", "#137333", "#6b46c1", "#b7791f", "#b00020"];

  // One chart of a sweep: each run gives a series of dots and a series for its Pareto front, joined
  // on one x axis (uPlot.join fills the gaps with nulls; the front line spans them).
  function drawSweepChart(id, runs, name, xLabel, yLabel) {
    const tables = [], series = [];
    let points = 0;
    runs.forEach((run, i) => {
      const colour = PALETTE[i % PALETTE.length];
      const dots = run[name].points.slice().sort((a, b) => a[0] - b[0]);
      if (i === 0) points = dots.length;
      tables.push([dots.map((p) => p[0]), dots.map((p) => p[1])]);
      tables.push([run[name].front.map((p) => p[0]), run[name].front.map((p) => p[1])]);
      series.push(dotSeries(`${run.label} points`, colour));
      series.push({ label: `${run.label} Pareto front`, stroke: colour, width: 2, dash: i ? [6, 4] : undefined, spanGaps: true, points: { show: true, size: 6 } });
    });
    const data = uPlot.join(tables);
    draw(id, data, series, false, [{ label: xLabel }, { label: yLabel, size: 80 }]);
    const el = document.getElementById(id);
    if (el) el.dataset.points = points;
  }

  function drawSweep(d) {
    drawSweepChart("chart-prefill", d.runs, "prefill", "TTFT p50 (ms)", "uncached input tok/s");
    drawSweepChart("chart-decode", d.runs, "decode", "per-user output tok/s", "output tok/s");
  }

  async function refresh() {
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return;
      const data = await response.json();
      if (kind === "run" || kind === "sweep") {
        (kind === "run" ? drawRun : drawSweep)(data);
        if (data.state === "queued" || data.state === "running") setTimeout(refresh, 2000);
      } else {
        drawTrend(data);
      }
    } catch (err) { console.warn("benchmark chart fetch failed", err); }
  }
  refresh();
})();
