// tokenscope report: builds the page from the JSON in #report-data
// (src/report/report_data.cpp) with uPlot, inlined before this script.
// Every chart has axis labels with units and a one-line caption saying how
// to read it. Time charts share one x axis (seconds from the run's start):
// zooming one (drag to select, double-click to reset) zooms them all, and
// the cursor moves on all of them.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const root = document.getElementById("report");
  root.textContent = "";
  const palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f",
                   "#7c3aed", "#b45309"];
  const runs = data.runs || [];
  const multi = runs.length > 1;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function fmt(v, d) {
    if (v === null || v === undefined || typeof v !== "number" || !isFinite(v)) return "-";
    return v.toFixed(d === undefined ? 2 : d);
  }
  function pct(v) { return typeof v === "number" ? (v * 100).toFixed(1) + "%" : "-"; }
  function table(head, rows) {
    return el("table", {}, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
              el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))));
  }
  function section(title, ...children) { root.append(el("h2", {}, title), ...children); }

  // ---- charts
  const timeCharts = [];
  let syncing = false;
  function chartBox(title, caption) {
    const box = el("div", {class: "chart"}, el("div", {class: "title"}, title), el("div", {class: "caption"}, caption));
    return box;
  }
  function width(container) { return Math.max(480, Math.min(620, (container.clientWidth || 620))); }
  // lines: [{label, x: [...], y: [...]}], each with its own x; joined on x.
  function lineChart(container, title, caption, xLabel, yLabel, lines, opts) {
    opts = opts || {};
    const box = chartBox(title, caption);
    container.append(box);
    lines = lines.filter((l) => l.x && l.x.length > 0);
    if (lines.length === 0) {
      box.append(el("div", {class: "empty"}, "no data"));
      return null;
    }
    const tables = lines.map((l) => {
      const xs = [], ys = [];
      for (let i = 0; i < l.x.length; i++) {
        if (l.x[i] === null || (opts.logX && !(l.x[i] > 0))) continue;
        xs.push(l.x[i]);
        ys.push(l.y[i]);
      }
      return [xs, ys];
    });
    const aligned = tables.length === 1 ? tables[0] : uPlot.join(tables);
    const series = [{label: xLabel}].concat(lines.map((l, i) => ({
      label: l.label,
      stroke: l.color || palette[i % palette.length],
      width: 1.5,
      dash: l.dash,
      paths: l.points ? () => null : (opts.steps ? uPlot.paths.stepped({align: 1}) : undefined),
      points: l.points ? {show: true, size: 7, fill: l.color, stroke: l.color} : undefined,
      spanGaps: l.points ? false : true,
    })));
    const o = {
      width: width(container),
      height: opts.height || 240,
      scales: {x: {time: false, distr: opts.logX ? 3 : 1}, y: opts.yRange ? {range: opts.yRange} : {}},
      axes: [{label: xLabel, labelSize: 20}, {label: yLabel, labelSize: 20, size: 60}],
      series: series,
      legend: {live: true},
    };
    if (opts.time) {
      o.cursor = {sync: {key: "time", setSeries: false}};
      o.hooks = {setScale: [(u, key) => {
        // Not while a chart is being built (its first scale is its own).
        if (key !== "x" || syncing || !timeCharts.includes(u)) return;
        syncing = true;
        for (const other of timeCharts)
          if (other !== u) other.setScale("x", {min: u.scales.x.min, max: u.scales.x.max});
        syncing = false;
      }]};
    }
    const u = new uPlot(o, aligned, box);
    if (opts.time) timeCharts.push(u);
    return u;
  }
  function runLabel(run, what) { return multi ? (what ? run.name + " " + what : run.name) : (what || run.name); }

  // ---- header
  root.append(el("h1", {}, "tokenscope report"));
  root.append(el("p", {class: "sub"}, runs.length + " run" + (runs.length === 1 ? "" : "s") + ": " +
                 runs.map((r) => r.name + (r.partial ? " (partial)" : "")).join(", ")));
  for (const n of data.notes || []) root.append(el("div", {class: "box note"}, n));

  // ---- per run: settings, warnings, notes
  runs.forEach((run) => {
    root.append(el("h2", {}, "Run " + run.name + (run.partial ? " (partial)" : "")));
    const s = run.settings || {};
    const rows = Object.entries(s).map(([k, v]) => [k.replace(/_/g, " "),
                                                       typeof v === "object" ? JSON.stringify(v) : String(v)]);
    if (rows.length) {
      const t = table(["setting", "value"], rows);
      t.className = "kv";
      root.append(t);
    }
    for (const w of run.warnings || []) root.append(el("div", {class: "box warn"}, "Warning: " + w));
    for (const n of run.notes || []) root.append(el("div", {class: "box note"}, n));
  });

  // ---- summary tables
  const sum = (r) => r.summary || {};
  const summaryRows = [
    ["requests", (s) => fmt(s.requests_total, 0)],
    ["completed", (s) => fmt(s.requests_completed, 0)],
    ["failed", (s) => fmt(s.requests_failed, 0)],
    ["duration (s)", (s) => fmt(s.duration_s, 2)],
    ["throughput (req/s)", (s) => fmt(s.request_throughput_rps, 2)],
    ["steady-state throughput (req/s)", (s) => fmt(s.request_throughput_steady_rps, 2)],
    ["output tokens/s", (s) => fmt(s.output_token_throughput_tps, 1)],
    ["goodput (req/s meeting every SLO)", (s) => fmt(s.goodput_rps, 2)],
    ["prompt tokens", (s) => fmt(s.prompt_tokens_total, 0)],
    ["output tokens", (s) => fmt(s.output_tokens_total, 0)],
    ["prefix-cache hit rate", (s) => pct(s.prefix_cache_hit_rate)],
    ["preemptions", (s) => fmt(s.preemptions_total, 0)],
    ["KV-cache usage peak", (s) => pct(s.kv_cache_usage_peak)],
  ];
  section("Summary", table(["metric"].concat(runs.map((r) => r.name)),
                           summaryRows.map(([label, f]) => [label].concat(runs.map((r) => f(sum(r)))))));
  const latencyRows = [["TTFT", "ttft_ms"], ["TTFT from schedule", "ttft_sched_ms"], ["TPOT", "tpot_ms"],
                       ["ITL", "itl_ms"], ["E2E", "e2e_ms"], ["send lag", "send_lag_ms"], ["queue", "queue_ms"]];
  const q = ["mean", "p50", "p90", "p95", "p99", "p99_9", "max"];
  const lrows = [];
  for (const [label, key] of latencyRows)
    for (const r of runs) {
      const d = sum(r)[key];
      if (!d || !d.count) continue;
      lrows.push([multi ? label + " · " + r.name : label].concat(q.map((k) => fmt(d[k], 2))));
    }
  root.append(el("h3", {}, "Latency (ms)"), table(["metric"].concat(q.map((k) => k.replace("_", "."))), lrows));
  const orows = [];
  for (const r of runs)
    for (const [k, v] of Object.entries(sum(r).requests_by_outcome || {})) orows.push([r.name, k, fmt(v, 0)]);
  if (orows.length) root.append(el("h3", {}, "Outcomes"), table(["run", "outcome", "requests"], orows));
  for (const [key, label] of [["by_class", "task class"], ["by_tenant", "tenant"]]) {
    const rows = [];
    for (const r of runs)
      for (const [name, g] of Object.entries(sum(r)[key] || {}))
        rows.push([r.name, name || "(none)", fmt(g.requests, 0), fmt(g.failed, 0), fmt(g.request_throughput_rps, 2),
                   fmt(g.goodput_rps, 2), fmt(g.ttft_ms && g.ttft_ms.p99, 1), fmt(g.tpot_ms && g.tpot_ms.p99, 2),
                   fmt(g.e2e_ms && g.e2e_ms.p99, 1)]);
    if (rows.length)
      root.append(el("h3", {}, "Per " + label),
                  table(["run", label, "requests", "failed", "req/s", "goodput", "TTFT p99 (ms)", "TPOT p99 (ms)",
                         "E2E p99 (ms)"], rows));
  }
  const slo = [];
  for (const r of runs)
    for (const [cls, a] of Object.entries(sum(r).slo_attainment || {}))
      slo.push([r.name, cls || "(all)", pct(a.met_fraction), a.pass ? "pass" : "FAIL"]);
  if (slo.length) root.append(el("h3", {}, "SLOs"), table(["run", "class", "requests meeting it", "verdict"], slo));
  const srows = [];
  for (const r of runs) {
    const s = r.server;
    if (!s || typeof s !== "object") continue;
    for (const [k, v] of Object.entries(s)) {
      if (v !== null && typeof v === "object") {
        if ("p50" in v) srows.push([r.name, k, "mean " + fmt(v.mean, 4) + ", p50 " + fmt(v.p50, 4) + ", p99 " +
                                               fmt(v.p99, 4) + " (" + fmt(v.count, 0) + ")"]);
        continue;
      }
      srows.push([r.name, k, typeof v === "number" ? fmt(v, Number.isInteger(v) ? 0 : 3) : String(v)]);
    }
  }
  if (srows.length)
    root.append(el("h3", {}, "Server's own counters over the run"), table(["run", "counter", "value"], srows));

  // ---- latency CDFs
  const cdfBox = el("div", {class: "charts"});
  section("Latency distributions", cdfBox);
  const cdfs = [
    ["ttft_ms", "TTFT", "time to first token from the send"],
    ["ttft_sched_ms", "TTFT from schedule", "time to first token from when the request was due (client lag counts)"],
    ["tpot_ms", "TPOT", "time per output token after the first, per request"],
    ["itl_ms", "ITL", "every gap between output tokens"],
    ["e2e_ms", "E2E", "request latency from the send to the last token"],
  ];
  for (const [key, name, what] of cdfs)
    lineChart(cdfBox, name + " CDF", "Share of requests (y) at or below a latency (x, log scale): " + what +
              ". Further left is faster; a long flat top is a tail.", name + " (ms)", "fraction of requests",
              runs.map((r, i) => ({label: runLabel(r), x: r.cdf[key].x, y: r.cdf[key].y, color: palette[i % palette.length]})),
              {logX: true, yRange: [0, 1]});

  // ---- over time
  const timeBox = el("div", {class: "charts"});
  section("Over time (seconds from the run's start; drag to zoom every chart, double-click to reset)", timeBox);
  const tl = (r) => r.timeline;
  const w = (r) => fmt(tl(r).window_s, 1) + " s";
  const tline = (r, i, key, what, dash) => ({label: runLabel(r, what), x: tl(r).t_s, y: tl(r)[key],
                                             color: palette[i % palette.length], dash: dash});
  const T = "time (s)";
  lineChart(timeBox, "Request rate", "Requests per second per window: planned (dashed) by schedule, completed and failed " +
            "by end. Completed below planned means the server fell behind.", T, "requests/s",
            runs.flatMap((r, i) => [tline(r, i, "planned_rps", "planned", [6, 4]), tline(r, i, "completed_rps", "completed"),
                                    tline(r, i, "failed_rps", "failed", [2, 2])]), {time: true});
  lineChart(timeBox, "Requests in flight", "Requests sent and not yet closed at the end of each window. A rising line " +
            "means arrivals outpace completions.", T, "requests", runs.map((r, i) => tline(r, i, "in_flight")), {time: true});
  lineChart(timeBox, "TTFT per window", "p50 (solid) and p99 (dashed) time to first token of the requests whose first " +
            "token came in each window.", T, "TTFT (ms)",
            runs.flatMap((r, i) => [tline(r, i, "ttft_p50_ms", "p50"), tline(r, i, "ttft_p99_ms", "p99", [6, 4])]), {time: true});
  lineChart(timeBox, "Token latency per window", "Per window of request ends: TPOT p50 (solid), TPOT p99 (dashed) and the " +
            "p99 of each request's longest inter-token gap (dotted): stalls show in the dotted line.", T, "ms per token",
            runs.flatMap((r, i) => [tline(r, i, "tpot_p50_ms", "TPOT p50"), tline(r, i, "tpot_p99_ms", "TPOT p99", [6, 4]),
                                    tline(r, i, "itl_max_p99_ms", "longest gap p99", [2, 2])]), {time: true});
  lineChart(timeBox, "Send lag", "How late the client sent requests after their scheduled time, p99 (solid) and max " +
            "(dashed) per window. Above a few ms the client, not the server, is the bottleneck.", T, "send lag (ms)",
            runs.flatMap((r, i) => [tline(r, i, "send_lag_p99_ms", "p99"), tline(r, i, "send_lag_max_ms", "max", [6, 4])]),
            {time: true});
  lineChart(timeBox, "Output token throughput", "Output tokens of the requests that ended in each window, per second " +
            "(windows of " + runs.map(w).join(", ") + ").", T, "tokens/s",
            runs.map((r, i) => tline(r, i, "output_tokens_per_s")), {time: true});

  // ---- sampled series (samples.jsonl)
  const known = [
    [["requests_running", "requests_waiting", "requests_swapped"], "Server batch and queue",
     "Requests running in the batch and waiting to be scheduled, as the server reports them. Waiting that grows " +
     "is a queue building up.", "requests"],
    [["kv_cache_usage"], "KV-cache usage", "Share of the KV cache in use. Near 1 the server preempts or queues.", "fraction"],
    [["prefix_cache_hit_rate"], "Prefix-cache hit rate per window",
     "Prompt tokens found in the prefix cache over those looked up, per sampling window.", "fraction"],
    [["preemptions_per_s"], "Preemptions", "Running requests preempted per second (KV cache full).", "preemptions/s"],
    [["prompt_tokens_per_s", "generation_tokens_per_s"], "Server token throughput",
     "Prompt (prefill) and output (decode) tokens the server processed per second.", "tokens/s"],
    [["iteration_tokens_mean", "iteration_tokens_p99"], "Batch size in tokens",
     "Tokens per engine step, mean and p99 per window: how full each step was.", "tokens"],
  ];
  const byName = new Map();
  runs.forEach((r, i) => (r.series || []).forEach((s) => {
    if (s.type === "counter") return;  // drawn as their per-second rate
    if (!byName.has(s.name)) byName.set(s.name, []);
    byName.get(s.name).push({run: r, index: i, s: s});
  }));
  const seriesBox = el("div", {class: "charts"});
  section("Server, GPU and host (samples.jsonl)", seriesBox);
  const label = (e) => runLabel(e.run, [e.s.name, e.s.source !== "server" ? e.s.source : "", e.s.labels]
                                           .filter((x) => x).join(" "));
  const used = new Set();
  let drawn = 0;
  for (const [names, title, caption, unit] of known) {
    const lines = [];
    names.forEach((n, k) => (byName.get(n) || []).forEach((e) => {
      lines.push({label: label(e), x: e.s.x, y: e.s.y, color: palette[(e.index * names.length + k) % palette.length]});
    }));
    names.forEach((n) => used.add(n));
    if (lines.length) {
      lineChart(seriesBox, title, caption, T, unit, lines, {time: true});
      drawn++;
    }
  }
  // The rest, one chart per quantity: a server histogram's per-window
  // quantiles and mean share one chart (server_ttft_seconds: p50, p90, p99,
  // mean); its observations per second are left out (requests_finished_per_s
  // says the same), except iteration_tokens' (engine steps per second).
  const chartOf = new Map();
  for (const [name, entries] of [...byName.entries()].sort()) {
    if (used.has(name)) continue;
    if (name.endsWith("_count_per_s") && name !== "iteration_tokens_count_per_s") continue;
    const m = name.match(/^(.+)_(p50|p90|p99|mean)$/);
    const key = m ? m[1] : name;
    if (!chartOf.has(key)) chartOf.set(key, []);
    for (const e of entries) chartOf.get(key).push({e: e, what: m ? m[2] : ""});
  }
  const groups = [["gpu_", "GPU"], ["host_", "host"], ["process_", "server process"], ["cgroup_", "server cgroup"],
                  ["server_", "server"], ["", ""]];
  const titled = new Set();
  for (const [prefix, what] of groups)
    for (const [key, entries] of chartOf) {
      if (titled.has(key) || !key.startsWith(prefix)) continue;
      titled.add(key);
      const first = entries[0].e.s;
      const quantiles = entries.some((x) => x.what);
      const caption = quantiles
          ? "The server's histogram over each sampling window: p50, p90, p99 and mean of what it observed then."
          : "As sampled" + (first.type === "derived" ? ", per window against the previous read" : "") +
            "; one line per source and label set.";
      const lines = entries.map((x, k) => ({
        label: quantiles ? runLabel(x.e.run, x.what + (x.e.s.labels ? " " + x.e.s.labels : "")) : label(x.e),
        x: x.e.s.x, y: x.e.s.y, color: palette[k % palette.length], dash: x.what === "mean" ? [6, 4] : undefined}));
      const shown = prefix && key.startsWith(prefix) ? key.slice(prefix.length) : key;
      lineChart(seriesBox, (what ? what + ": " : "") + shown.replace(/_/g, " "), caption, T, first.unit || "value",
                lines, {time: true});
      drawn++;
    }
  if (!drawn) seriesBox.append(el("div", {class: "empty"}, "No sampled series: no run has samples.jsonl."));

  // ---- hit rate x p99 TTFT -> throughput, per window
  const heatBox = el("div", {class: "charts"});
  const points = [];
  runs.forEach((r) => {
    const t = tl(r), hr = t.prefix_cache_hit_rate || [];
    for (let k = 0; k < hr.length; k++)
      if (typeof hr[k] === "number" && typeof t.ttft_p99_ms[k] === "number" && typeof t.output_tokens_per_s[k] === "number")
        points.push({x: hr[k], y: t.ttft_p99_ms[k], tps: t.output_tokens_per_s[k]});
  });
  if (points.length) {
    section("Prefix-cache hit rate, latency and throughput", heatBox);
    points.sort((a, b) => a.x - b.x);
    const byTps = points.map((p) => p.tps).sort((a, b) => a - b);
    const cut1 = byTps[Math.floor(byTps.length / 3)], cut2 = byTps[Math.floor(2 * byTps.length / 3)];
    const bands = [["lowest third of output tokens/s", (v) => v < cut1, "#93c5fd"],
                   ["middle third", (v) => v >= cut1 && v < cut2, "#3b82f6"],
                   ["highest third", (v) => v >= cut2, "#1e3a8a"]];
    const xs = points.map((p) => p.x);
    const u = lineChart(heatBox, "Hit rate × p99 TTFT → throughput",
                        "Each point is one time window: its prefix-cache hit rate (x) and p99 TTFT (y), darker where " +
                        "the window had more output tokens/s. Throughput high at low latency and high hit rate is the goal.",
                        "prefix-cache hit rate (fraction)", "TTFT p99 (ms)",
                        bands.map(([name, inBand, color]) => ({label: name, x: xs,
                                                               y: points.map((p) => (inBand(p.tps) ? p.y : null)),
                                                               color: color, points: true})),
                        {height: 280});
    void u;
  }

  // ---- sweeps
  for (const sw of data.sweeps || []) {
    const box = el("div", {class: "charts"});
    section("Sweep " + sw.name, box);
    const c = sw.curve || [];
    const x = c.map((p) => p.rate_rps);
    lineChart(box, "Throughput vs offered rate", "Achieved and goodput (requests meeting every SLO) per offered " +
              "rate. Where goodput leaves the diagonal, the server saturates.", "offered rate (req/s)", "requests/s",
              [{label: "offered", x: x, y: x, dash: [6, 4], color: "#888"},
               {label: "achieved", x: x, y: c.map((p) => p.achieved_rps)},
               {label: "goodput", x: x, y: c.map((p) => p.goodput_rps)}]);
    lineChart(box, "Latency vs offered rate", "p99 TTFT and TPOT of each run of the sweep.", "offered rate (req/s)", "ms",
              [{label: "TTFT p99", x: x, y: c.map((p) => p.ttft_p99_ms)},
               {label: "TPOT p99", x: x, y: c.map((p) => p.tpot_p99_ms)}]);
    if (typeof sw.max_rate_meeting_slo === "number")
      box.append(el("p", {}, "Highest rate meeting every SLO: " + fmt(sw.max_rate_meeting_slo, 3) + " req/s."));
  }
  root.append(el("p", {class: "sub"}, "Statistics are computed on every request; charts are reduced to at most four " +
                 "points per pixel column (first, min, max, last), so spikes stay visible."));
  document.body.setAttribute("data-charts", String(timeCharts.length));
})();
