// Benchmark charts with uPlot: a run's TTFT timeline and distribution, or a schedule's trend.
(function () {
  const script = document.currentScript;
  const url = script.dataset.url;
  const kind = script.dataset.kind;
  const charts = {};

  function draw(id, data, series, xTime) {
    const el = document.getElementById(id);
    if (!el) return;
    el.dataset.points = data[0].length;
    if (charts[id]) { charts[id].setData(data); return; }
    charts[id] = new uPlot({
      width: el.clientWidth || 480, height: 220,
      scales: { x: { time: xTime } },
      series: [{}].concat(series),
    }, data, el);
  }

  const dots = (label, stroke) => ({ label, stroke, width: 0, points: { show: true, size: 4, fill: stroke } });

  function drawRun(d) {
    draw("chart-timeline", [d.start_s, d.ttft_ms], [dots("TTFT ms", "#2b6cb0")], false);
    const sorted = d.ttft_ms.slice().sort((a, b) => a - b);
    const pct = sorted.map((_, i) => (sorted.length > 1 ? (100 * i) / (sorted.length - 1) : 100));
    draw("chart-distribution", [pct, sorted], [{ label: "TTFT ms", stroke: "#b7791f", width: 2 }], false);
  }

  function drawTrend(d) {
    draw("chart-ttft", [d.t, d.ttft_p50_ms], [{ label: "TTFT p50 ms", stroke: "#2b6cb0", width: 2, points: { show: true } }], true);
    draw("chart-tps", [d.t, d.output_tokens_per_s], [{ label: "tokens/s", stroke: "#137333", width: 2, points: { show: true } }], true);
  }

  async function refresh() {
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return;
      const data = await response.json();
      if (kind === "run") {
        drawRun(data);
        if (data.state === "queued" || data.state === "running") setTimeout(refresh, 2000);
      } else {
        drawTrend(data);
      }
    } catch (err) { console.warn("benchmark chart fetch failed", err); }
  }
  refresh();
})();
