// Charts on the deployment page: the samples endpoint aggregates over the replicas per time bucket;
// this draws them with uPlot for the chosen time range and redraws every few seconds.
(function () {
  const script = document.currentScript;
  const url = script.dataset.samplesUrl;
  const picker = document.getElementById("chart-range");
  const note = document.getElementById("chart-note");
  const SPECS = {
    ttft: { unit: "ms", series: [["ttft_p50_ms", "p50 (ms)", "#2b6cb0"], ["ttft_p90_ms", "p90 (ms)", "#c05621"]] },
    tps: { unit: "tok/s", series: [["tokens_per_s", "sum (tok/s)", "#2f855a"]] },
    hits: { unit: "%", scale: 100, series: [["prefix_cache_hit_rate", "hit rate (%)", "#6b46c1"]] },
    // one line per KV tier the replicas report; "none" says there is none, "latest" each one's bytes held and onload GB/s
    tiers: { unit: "%", scale: 100, byTier: "kv_tier_hit_rate", none: "kv-tiers-none", latest: "kv-tier-latest", summary: tierSummary },
    // cost per million tokens of each kind; drawn only where a replica reports a price ("requires"), else "none" says how to set one
    cost: {
      unit: "$", precise: true, requires: "spend_per_hour", none: "cost-none", latest: "cost-latest", summary: costSummary,
      series: [["cost_per_million.input_uncached", "input, uncached ($/M)", "#2b6cb0"],
               ["cost_per_million.input_cached", "input, cached ($/M)", "#6b46c1"],
               ["cost_per_million.output", "output ($/M)", "#c05621"]],
    },
    // speculative decoding: drawn only where a replica verified drafts, with the mean accepted length below
    spec: {
      unit: "%", scale: 100, requires: "spec_acceptance_rate", none: "spec-none", latest: "spec-latest",
      summary: specSummary, series: [["spec_acceptance_rate", "draft acceptance (%)", "#2f855a"]],
    },
  };
  const TIER_COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280"];
  const charts = {};

  function label(value, unit, precise) {
    if (value === null || value === undefined) return "—";
    if (precise && value !== 0 && Math.abs(value) < 1) return `${value.toPrecision(3)} ${unit}`;  // a fraction of a cent
    const digits = Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
    return `${value.toFixed(digits)} ${unit}`;
  }

  // A series of the samples body by key: "tokens_per_s", or "cost_per_million.output" inside a group.
  function get(body, key) {
    return key.split(".").reduce((value, part) => (value ? value[part] : undefined), body);
  }

  // A chart's lines as [values, legend, colour]; none where spec.requires has no value in the range
  // (no price set, no draft verified).
  function lines(spec, body) {
    if (spec.requires && newest(get(body, spec.requires)) === null) return [];
    if (!spec.byTier) return spec.series.map(([key, name, stroke]) => [get(body, key), name, stroke]);
    return Object.entries(body[spec.byTier] || {}).map(
      ([tier, values], i) => [values, tier, TIER_COLORS[i % TIER_COLORS.length]]);
  }

  function newest(values) {
    const found = (values || []).filter((v) => v !== null);
    return found.length ? found[found.length - 1] : null;
  }

  function tierSummary(body) {
    return Object.keys(body.kv_tier_hit_rate || {}).map((tier) => {
      const held = newest(body.kv_tier_bytes_held[tier]);
      const onload = newest(body.kv_tier_onload_gb_per_s[tier]);
      return `${tier}: ${label(held === null ? null : held / 1e9, "GB")} held, onload ${label(onload, "GB/s")}`;
    }).join(" · ");
  }

  // Spend per hour and tokens/s per accelerator at the latest point that has them.
  function costSummary(body) {
    const spend = newest(body.spend_per_hour);
    const perAccelerator = body.tokens_per_s_per_accelerator || {};
    return `Spend ${spend === null ? "— (no price set)" : label(spend, "$/h", true)} · tokens/s per accelerator: ` +
      `input ${label(newest(perAccelerator.input), "tok/s")}, output ${label(newest(perAccelerator.output), "tok/s")}`;
  }

  // The mean accepted length and the acceptance at the latest point that has them.
  function specSummary(body) {
    const length = newest(body.spec_mean_accepted_length);
    const rate = newest(body.spec_acceptance_rate);
    return `Mean accepted length ${label(length, "tokens per step")} · acceptance ${label(rate === null ? null : rate * 100, "%")}`;
  }

  function build(el, spec, drawn, data) {
    return new uPlot({
      width: Math.max(el.clientWidth, 240), height: 200,
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [
        { space: 90 },
        { size: 84, values: (u, splits) => splits.map((v) => label(v, spec.unit, spec.precise)) },
      ],
      series: [{}, ...drawn.map(([, name, stroke]) => ({
        label: name, stroke, width: 2, value: (u, v) => label(v, spec.unit, spec.precise),
        points: { show: true, size: 5, fill: stroke },  // a bucket between two gaps has no line to draw
      }))],
    }, data, el);
  }

  function draw(el, body) {
    const spec = SPECS[el.dataset.chart];
    const scale = spec.scale || 1;
    const drawn = lines(spec, body);
    el.dataset.range = body.range;
    if (spec.none) document.getElementById(spec.none).hidden = drawn.length > 0;
    if (spec.latest) document.getElementById(spec.latest).textContent = spec.summary(body);
    if (!drawn.length) {  // say so (spec.none) rather than draw empty axes
      if (charts[el.id]) charts[el.id].plot.destroy();
      delete charts[el.id];
      el.dataset.points = 0;
      return;
    }
    const columns = drawn.map(([values]) => values.map((v) => (v === null ? null : v * scale)));
    const data = [body.t, ...columns];
    el.dataset.points = columns[0].filter((v) => v !== null).length;
    el.dataset.max = Math.max(0, ...columns[0].filter((v) => v !== null));
    el.dataset.values = JSON.stringify(columns[0]);  // what the first line draws, for tests and curious readers
    el.dataset.lines = JSON.stringify(drawn.map(([, name]) => name));
    const shape = `${body.range} ${el.dataset.lines}`;  // a new range or set of lines needs a new plot
    if (charts[el.id] && charts[el.id].shape === shape) { charts[el.id].plot.setData(data); return; }
    if (charts[el.id]) charts[el.id].plot.destroy();
    charts[el.id] = { shape, plot: build(el, spec, drawn, data) };
  }

  let timer = null;
  let latest = 0;  // the newest refresh: an older one still in flight neither draws nor reschedules
  async function refresh() {
    clearTimeout(timer);
    const mine = ++latest;
    let every = 5000;
    try {
      const response = await fetch(`${url}?range=${encodeURIComponent(picker.value)}`, { credentials: "same-origin" });
      const body = response.ok ? await response.json() : null;
      if (mine !== latest) return;
      if (body) {
        note.textContent = body.note || `${body.source}: one point per ${body.step_s} s`;
        document.querySelectorAll("[data-chart]").forEach((el) => draw(el, body));
        every = Math.max(every, body.step_s * 1000);  // a long range gains a point per step, no sooner
      }
    } catch (err) { console.warn("samples fetch failed", err); }
    if (mine === latest) timer = setTimeout(refresh, every);
  }
  picker.addEventListener("change", refresh);
  refresh();
})();
