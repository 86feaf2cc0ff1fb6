// Live charts on the deployment page: poll the scraped samples and redraw with uPlot.
(function () {
  const script = document.currentScript;
  const url = script.dataset.samplesUrl;
  const charts = {};

  function draw(el, t, values) {
    const data = [t, values];
    if (charts[el.id]) { charts[el.id].setData(data); return; }
    charts[el.id] = new uPlot({
      width: el.clientWidth || 360, height: 180,
      scales: { x: { time: true } },
      series: [{}, { label: el.dataset.series, stroke: "#2b6cb0", width: 2, spanGaps: true }],
    }, data, el);
  }

  async function refresh() {
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return;
      const series = await response.json();
      document.querySelectorAll("[data-series]").forEach((el) => {
        const values = series[el.dataset.series];
        el.dataset.points = values.filter((v) => v !== null).length;
        draw(el, series.t, values);
      });
    } catch (err) { console.warn("samples fetch failed", err); }
  }
  refresh();
  setInterval(refresh, 2000);
})();
