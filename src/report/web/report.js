// tokenscope report: builds the page from the JSON in #report-data
// (src/report/report_data.cpp) with uPlot, inlined before this script.
// Every chart has axis labels with units and a one-line caption saying how
// to read it. Time charts share one x axis (seconds from the run's start):
// zooming one (drag to select, double-click to reset) zooms them all, the
// cursor moves on all of them, and the lifecycle phases (from `check`) are
// shaded on each. The heat map and the waterfall are drawn by uPlot draw
// hooks on uPlot's own scales and canvas.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const root = document.getElementById("report");
  root.textContent = "";
  const palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f",
                   "#7c3aed", "#b45309"];
  const runs = data.runs || [];
  const probes = data.probes || [];
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
  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function fmt(v, d) {
    if (!isNum(v)) return "-";
    return v.toFixed(d === undefined ? 2 : d);
  }
  // A number for a table cell or an axis: 3 significant digits, thousands
  // as k, M, G.
  function si(v) {
    if (!isNum(v)) return "-";
    const a = Math.abs(v);
    if (a >= 1e12) return (v / 1e12).toPrecision(3) + "T";
    if (a >= 1e9) return (v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
    if (a === 0) return "0";
    if (a >= 100) return v.toFixed(0);
    return String(+v.toPrecision(3));
  }
  function pct(v) { return isNum(v) ? (v * 100).toFixed(1) + "%" : "-"; }
  // A median with its 95% interval ({median, ci95_low, ci95_high}).
  function ci(s, f) {
    f = f || ((v) => si(v));
    if (!s || !isNum(s.median)) return "-";
    return f(s.median) + (isNum(s.ci95_low) && isNum(s.ci95_high) ? " [" + f(s.ci95_low) + ", " + f(s.ci95_high) + "]"
                                                                  : "");
  }
  function table(head, rows, cls) {
    return el("table", cls ? {class: cls} : {},
              el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
              el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))));
  }
  function section(title, intro, ...children) {
    const s = el("section", {}, el("h2", {}, title));
    if (intro) s.append(el("p", {class: "sub"}, intro));
    s.append(...children);
    root.append(s);
    return s;
  }

  // ---- charts
  const timeCharts = [];
  // Every chart, for the browser test (tests/blackbox/node/report_browser.mjs).
  const allCharts = [];
  window.tokenscopeCharts = allCharts;
  let syncing = false;
  function chartBox(container, title, caption) {
    const box = el("div", {class: "chart"}, el("div", {class: "title"}, title), el("div", {class: "caption"}, caption));
    container.append(box);
    return box;
  }
  // A chart's width, read from the layout once per container: reading it
  // for every chart would lay the page out again each time.
  const widths = new Map();
  function width(container) {
    if (!widths.has(container)) widths.set(container, Math.max(480, Math.min(620, container.clientWidth || 620)));
    return widths.get(container);
  }
  const axisValues = (u, splits) => splits.map((v) => (v === null ? "" : si(v)));
  // The largest 1, 2 or 5 times a power of ten at or below v: where a log
  // axis starts, so that its grid lines fall on round values.
  const floor125 = (v) => {
    if (!(v > 0)) return v;
    const p = Math.pow(10, Math.floor(Math.log10(v) + 1e-9));
    return [5, 2, 1].map((k) => k * p).find((x) => x <= v * (1 + 1e-9)) || p;
  };
  // A log axis labels 1, 2 and 5 times a power of ten (its other grid lines
  // stay unlabelled).
  const logAxisValues = (u, splits) => splits.map((v) => {
    if (!(v > 0)) return "";
    const m = v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9));
    return [1, 2, 5].some((k) => Math.abs(m - k) < 1e-6) ? si(v) : "";
  });
  // A setting's number rounded to 6 significant digits; anything else as it is.
  const roundSetting = (x) => typeof x === "number" && isFinite(x) && !Number.isInteger(x) ? +x.toPrecision(6) : x;
  // Lifecycle phases shaded behind the series of every time chart.
  const phaseColors = {"warm-up": "rgba(148,163,184,0.22)", "warmup": "rgba(148,163,184,0.22)",
                       "steady": "rgba(34,197,94,0.10)", "degradation": "rgba(239,68,68,0.16)",
                       "drain": "rgba(100,116,139,0.12)"};
  // The phases of every run that has them: runs overlaid have phases of
  // their own, so each run's are shaded in a band of its own (the first run
  // on top), never mixed.
  const phaseRuns = runs.filter((r) => (r.phases || []).length);
  const phases = phaseRuns.flatMap((r) => r.phases);
  function shadePhases(u) {
    if (!phaseRuns.length) return;
    const ctx = u.ctx, b = u.bbox;
    const band = b.height / phaseRuns.length;
    ctx.save();
    phaseRuns.forEach((run, k) => {
      for (const p of run.phases) {
        const x0 = u.valToPos(p.start_s, "x", true), x1 = u.valToPos(p.end_s, "x", true);
        const l = Math.max(b.left, Math.min(x0, x1)), r = Math.min(b.left + b.width, Math.max(x0, x1));
        if (r <= l) continue;
        ctx.fillStyle = phaseColors[p.phase] || "rgba(234,179,8,0.15)";
        ctx.fillRect(l, b.top + k * band, r - l, band);
      }
    });
    ctx.restore();
  }
  function register(u, time) {
    if (time) timeCharts.push(u);
    allCharts.push({u: u, time: !!time});
  }
  const timeHooks = {
    drawClear: [shadePhases],
    setScale: [(u, key) => {
      // Not while a chart is being built (its first scale is its own).
      if (key !== "x" || syncing || !timeCharts.includes(u)) return;
      syncing = true;
      for (const other of timeCharts)
        if (other !== u) other.setScale("x", {min: u.scales.x.min, max: u.scales.x.max});
      syncing = false;
    }],
  };
  // lines: [{label, x: [...], y: [...]}], each with its own x; joined on x.
  function lineChart(container, title, caption, xLabel, yLabel, lines, opts) {
    opts = opts || {};
    const box = chartBox(container, title, caption);
    lines = lines.filter((l) => l.x && l.x.length > 0 && l.y.some((v) => isNum(v)));
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
    // A missing value (null: a window without requests, a sampling gap) is a
    // gap in the line, never bridged; the alignment of lines with different
    // x (undefined) is bridged.
    const aligned = tables.length === 1 ? tables[0] : uPlot.join(tables, tables.map(() => [0, 1]));
    // Points are drawn where a value stands alone between gaps (a line of a
    // single value included), and only there, so that it is seen: the
    // indexes of those values in the aligned data (alignment's undefined
    // values are bridged, so they are passed over).
    const isolatedAt = (ys) => {
      const out = [];
      const neighbour = (i, step) => {
        for (let j = i + step; j >= 0 && j < ys.length; j += step) if (ys[j] !== undefined) return ys[j];
        return null;
      };
      for (let i = 0; i < ys.length; i++)
        if (isNum(ys[i]) && !isNum(neighbour(i, -1)) && !isNum(neighbour(i, 1))) out.push(i);
      return out;
    };
    const series = [{label: xLabel}].concat(lines.map((l, i) => {
      const alone = isolatedAt(aligned[i + 1]);
      return {
        label: l.label,
        stroke: l.color || palette[i % palette.length],
        width: 1.5,
        dash: l.dash,
        paths: opts.steps ? uPlot.paths.stepped({align: 1}) : undefined,
        points: alone.length ? {show: true, filter: alone, size: 7, fill: l.color || palette[i % palette.length]}
                             : {show: false},
        spanGaps: false,
      };
    }));
    // A y range that starts at 0 for what cannot be negative, and that
    // stays readable when every value is 0.
    // A little room below and above, so that a line at the edge (a series
    // that is 0 throughout) is drawn inside the plot, not on its border.
    const yRange = opts.yRange ? (u) => [opts.yRange[0] - 0.03 * (opts.yRange[1] - opts.yRange[0]),
                                         opts.yRange[1] + 0.03 * (opts.yRange[1] - opts.yRange[0])]
                               : (u, min, max) => {
      const lo = Math.min(0, min), hi = max > lo ? max : lo + 1;
      return [lo - (hi - lo) * 0.03, hi + (hi - lo) * 0.05];
    };
    const o = {
      width: width(container),
      height: opts.height || 230,
      scales: {x: opts.logX ? {time: false, distr: 3, range: (u, min, max) => [floor125(min), max * 1.15]}
                            : {time: false},
               y: {range: yRange}},
      axes: [opts.logX ? {label: xLabel, labelSize: 20, values: logAxisValues, filter: (u, splits) => splits}
                       : {label: xLabel, labelSize: 20, values: axisValues},
             {label: yLabel, labelSize: 20, size: 56, values: axisValues}],
      series: series,
      legend: {live: true},
    };
    if (opts.time) {
      o.cursor = {sync: {key: "time", setSeries: false}};
      o.hooks = timeHooks;
    }
    const u = new uPlot(o, aligned, box);
    register(u, opts.time);
    return u;
  }
  function runLabel(run, what) { return multi ? (what ? run.name + " " + what : run.name) : (what || run.name); }
  // Runs overlaid: one colour per run on every chart, the quantities of a
  // run told apart by dashes. One run: one colour per line.
  const dashes = [undefined, [6, 4], [2, 3], [10, 3, 2, 3], [1, 5], [12, 6]];
  function look(runIndex, k) {
    return multi ? {color: palette[runIndex % palette.length], dash: dashes[k % dashes.length]}
                 : {color: palette[k % palette.length], dash: undefined};
  }

  // A colour scale (viridis-like) for the heat map, t in [0, 1].
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colourAt(t) {
    t = Math.max(0, Math.min(1, isNum(t) ? t : 0)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(t)), f = t - i;
    const c = stops[i].map((v, k) => Math.round(v + (stops[i + 1][k] - v) * f));
    return "rgb(" + c.join(",") + ")";
  }
  function colourBar(min, max, label) {
    const grad = "linear-gradient(to right, " + [0, 0.25, 0.5, 0.75, 1].map(colourAt).join(", ") + ")";
    const bar = el("div", {class: "colourbar"});
    bar.style.background = grad;
    return el("div", {class: "colourscale"}, el("span", {}, si(min)), bar, el("span", {}, si(max)),
              el("span", {class: "sub"}, " " + label));
  }
  // A chart whose marks are drawn by `draw(u, ctx)` on uPlot's scales: x and
  // y ranges fixed, one invisible series so that uPlot has data.
  function drawnChart(container, title, caption, xLabel, yLabel, xRange, yRange, draw, opts) {
    opts = opts || {};
    const box = chartBox(container, title, caption);
    const o = {
      width: opts.width || width(container),
      height: opts.height || 280,
      scales: {x: {time: false, auto: false, range: xRange, distr: opts.logX ? 3 : 1},
               y: {auto: false, range: yRange, distr: opts.logY ? 3 : 1, dir: opts.yDir || 1}},
      axes: [{label: xLabel, labelSize: 20, values: opts.xValues || axisValues},
             Object.assign({label: yLabel, labelSize: 20, size: opts.ySize || 56, values: opts.yValues || axisValues},
                           opts.ySplits ? {splits: opts.ySplits, filter: (u, splits) => splits} : {})],
      series: [{label: xLabel}, {label: opts.seriesLabel || yLabel, stroke: "transparent", points: {show: false}}],
      legend: {show: false},
      cursor: {drag: {x: true, y: false}, points: {show: false}},
      hooks: {draw: [(u) => {
        const ctx = u.ctx, b = u.bbox;
        ctx.save();
        ctx.beginPath();
        ctx.rect(b.left, b.top, b.width, b.height);
        ctx.clip();
        draw(u, ctx);
        ctx.restore();
      }]},
    };
    // A tooltip: opts.tooltip(u, left, top) gives the text for the cursor at
    // (left, top), CSS pixels in the plot area, or null for none.
    let tip = null;
    if (opts.tooltip)
      o.hooks.setCursor = [(u) => {
        const {left, top} = u.cursor;
        const text = isNum(left) && left >= 0 ? opts.tooltip(u, left, top) : null;
        if (!text) {
          if (tip) tip.style.display = "none";
          return;
        }
        if (!tip) {
          tip = el("div", {class: "tip"});
          u.over.append(tip);
        }
        tip.textContent = text;
        tip.style.display = "block";
        // Beside the cursor, kept inside the plot area.
        const w = tip.offsetWidth, h = tip.offsetHeight;
        tip.style.left = Math.max(0, Math.min(left + 12, u.over.clientWidth - w)) + "px";
        tip.style.top = (top + 14 + h > u.over.clientHeight ? Math.max(0, top - h - 8) : top + 14) + "px";
      }];
    const u = new uPlot(o, [[xRange[0], xRange[1]], [null, null]], box);
    register(u, false);
    if (opts.after) box.append(opts.after);
    return u;
  }

  // ---- header: one card row per run
  root.append(el("h1", {}, "tokenscope report"));
  if (runs.length)
    root.append(el("p", {class: "sub"}, runs.length + " run" + (runs.length === 1 ? "" : "s") + ": " +
                   runs.map((r) => r.name + (r.partial ? " (partial)" : "")).join(", ") +
                   (probes.length ? "; " + probes.length + " probe result" + (probes.length === 1 ? "" : "s") : "")));
  for (const n of data.notes || []) root.append(el("div", {class: "box note"}, n));
  const sum = (r) => r.summary || {};
  runs.forEach((run) => {
    const s = sum(run), st = run.settings || {};
    const card = (label, value, sub) => el("div", {class: "card"}, el("div", {class: "label"}, label),
                                           el("div", {class: "value"}, value), sub ? el("div", {class: "sub"}, sub) : null);
    const what = [st.model, st.load_mode === "open" && isNum(st.rate_rps) ? st.rate_rps + " req/s" : st.load_mode,
                  st.workload].filter((x) => x).join(" · ");
    root.append(el("div", {class: "runhead"}, el("span", {class: "runname"}, run.name + (run.partial ? " (partial)" : "")),
                   el("span", {class: "sub"}, " " + (run.command || "") + (what ? " — " + what : ""))));
    const failed = s.requests_failed || 0;
    root.append(el("div", {class: "cards"},
                   card("requests", fmt(s.requests_total, 0), failed ? fmt(failed, 0) + " failed" : "none failed"),
                   card("throughput", fmt(s.request_throughput_rps, 2) + " req/s",
                        fmt(s.output_token_throughput_tps, 0) + " output tok/s"),
                   card("goodput", isNum(s.goodput_rps) ? fmt(s.goodput_rps, 2) + " req/s" : "-",
                        isNum(s.goodput_rps) ? "meeting every SLO" : "no SLO set"),
                   card("TTFT p50 / p99", fmt(s.ttft_ms && s.ttft_ms.p50, 1) + " / " + fmt(s.ttft_ms && s.ttft_ms.p99, 1) + " ms"),
                   card("TPOT p50 / p99", fmt(s.tpot_ms && s.tpot_ms.p50, 2) + " / " + fmt(s.tpot_ms && s.tpot_ms.p99, 2) + " ms"),
                   card("ITL p99", fmt(s.itl_ms && s.itl_ms.p99, 2) + " ms", "max " + fmt(s.itl_ms && s.itl_ms.max, 1) + " ms"),
                   // The server's counters; else what the responses reported (check's item 7).
                   isNum(s.prefix_cache_hit_rate) || !run.reported_prefix_hit_rate
                     ? card("prefix-cache hits", pct(s.prefix_cache_hit_rate),
                            "KV peak " + pct(s.kv_cache_usage_peak) + ", " + fmt(s.preemptions_total, 0) + " preemptions")
                     : card("prefix-cache hits", pct(run.reported_prefix_hit_rate.rate),
                            "as " + fmt(run.reported_prefix_hit_rate.requests, 0) + " responses reported their cached " +
                            "prompt tokens; KV peak " + pct(s.kv_cache_usage_peak))));
    for (const w of run.warnings || []) root.append(el("div", {class: "box warn"}, "Warning: " + w));
    for (const n of run.notes || []) root.append(el("div", {class: "box note"}, n));
  });

  // ---- summary tables
  if (runs.length) {
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
    const reasoning = (r) => (sum(r).requests_with_reasoning || 0) > 0;
    if (runs.some(reasoning))
      summaryRows.push(["requests with reasoning", (s) => fmt(s.requests_with_reasoning, 0)],
                       ["reasoning tokens", (s) => fmt(s.reasoning_tokens_total, 0)]);
    const latencyRows = [["TTFT", "ttft_ms"], ["TTFT from schedule", "ttft_sched_ms"],
                         ["TTFO (first answer token)", "ttfo_ms", reasoning], ["TPOT", "tpot_ms"],
                         ["TPOT of the answer", "tpot_answer_ms", reasoning],
                         ["ITL", "itl_ms"], ["E2E", "e2e_ms"], ["send lag (due → sent)", "send_lag_ms"],
                         ["queue (due → slot)", "queue_ms"]];
    const q = ["mean", "p50", "p90", "p95", "p99", "p99_9", "max"];
    const lrows = [];
    for (const [label, key, only] of latencyRows)
      for (const r of runs) {
        if (only && !only(r)) continue;  // TTFO equals TTFT without reasoning
        const d = sum(r)[key];
        if (!d || !d.count) continue;
        lrows.push([multi ? label + " · " + r.name : label].concat(q.map((k) => fmt(d[k], 2))));
      }
    // Per class: each SLO's target against the run's value at the SLO's
    // percentile, the requests meeting every SLO, the verdict.
    const slo = [];
    for (const r of runs)
      for (const [cls, a] of Object.entries(sum(r).slo_attainment || {})) {
        const metrics = Object.entries(a).filter(([k, v]) => v && typeof v === "object" && "target" in v);
        const each = metrics.map(([k, v]) => k.replace(/_ms$/, "").toUpperCase() + " p" + fmt(a.percentile, 0) + " " +
                                             fmt(v.value, 1) + " / " + fmt(v.target, 1) + " ms " +
                                             (v.pass ? "ok" : "missed")).join("; ");
        slo.push([r.name, cls || "(all)", each || "-", fmt(a.met, 0) + " of " + fmt(a.requests, 0) + " (" +
                  pct(a.met_fraction) + ")", fmt(a.goodput_rps, 2), a.pass ? "pass" : "FAIL"]);
      }
    const side = el("div", {class: "tables"},
                    el("div", {}, el("h3", {}, "Summary"),
                       table(["metric"].concat(runs.map((r) => r.name)),
                             summaryRows.map(([label, f]) => [label].concat(runs.map((r) => f(sum(r))))))),
                    el("div", {}, el("h3", {}, "Latency (ms)"),
                       lrows.length ? table(["metric"].concat(q.map((k) => k.replace("_", "."))), lrows)
                                    : el("p", {class: "empty"}, "No request completed: no latency to show."),
                       slo.length ? el("h3", {}, "SLOs") : null,
                       slo.length ? table(["run", "class", "value / target", "requests meeting every SLO",
                                           "goodput (req/s)", "verdict"], slo) : null));
    section("Summary", "Statistics over every request after the warm-up; latencies in milliseconds.", side);
  }

  // ---- agentic tasks (tasks.jsonl and run.json's "tasks")
  const taskRuns = runs.filter((r) => r.tasks);
  if (taskRuns.length) {
    const multiTasks = taskRuns.length > 1;
    const tk = (r) => r.tasks.summary || {};
    // A count from run.json's summary, else from the records (a run cut
    // short has no summary).
    const count = (r, k) => (isNum(tk(r)[k]) ? tk(r)[k] : (r.tasks.records || {})[k]);
    // A percentile of the completion time with its 95% interval ({value, ci95: [low, high]}).
    const withCi = (v) => (!v || !isNum(v.value) ? "-" : fmt(v.value, 0) +
                           (Array.isArray(v.ci95) && isNum(v.ci95[0]) && isNum(v.ci95[1])
                                ? " [" + fmt(v.ci95[0], 0) + ", " + fmt(v.ci95[1], 0) + "]" : ""));
    const at = (o, ...keys) => keys.reduce((v, k) => (v && typeof v === "object" ? v[k] : undefined), o);
    const rows = [
      ["tasks (warm-up apart)", (r) => fmt(count(r, "tasks"), 0)],
      ["ok", (r) => fmt(count(r, "ok"), 0)],
      ["failed", (r) => fmt(count(r, "failed"), 0)],
      ["cancelled", (r) => fmt(count(r, "cancelled"), 0)],
      ["pass rate (ok / (ok + failed)) [95% interval]", (r) => {
        const ci = tk(r).pass_rate_ci95;
        return pct(tk(r).pass_rate) + (Array.isArray(ci) && isNum(ci[0]) && isNum(ci[1])
                                           ? " [" + pct(ci[0]) + ", " + pct(ci[1]) + "]" : "");
      }],
      ["completion p50 (ms) [95% interval]", (r) => withCi(at(tk(r), "completion_ms", "p50"))],
      ["completion p90 (ms) [95% interval]", (r) => withCi(at(tk(r), "completion_ms", "p90"))],
      ["completion p99 (ms) [95% interval]", (r) => withCi(at(tk(r), "completion_ms", "p99"))],
      ["goodput (ok tasks within their SLO)", (r) => {
        const g = tk(r).goodput;
        return g && isNum(g.tasks) ? fmt(g.tasks, 0) + " · " + fmt(g.per_s, 2) + "/s over " + fmt(g.span_s, 1) + " s"
                                   : "-";
      }],
      ["steps per task (mean)", (r) => fmt(at(tk(r), "per_task", "steps"), 2)],
      ["model calls per task", (r) => fmt(at(tk(r), "per_task", "model_calls"), 2)],
      ["tool calls per task (attempts)", (r) => fmt(at(tk(r), "per_task", "tool_calls"), 2)],
      ["prompt tokens per task", (r) => fmt(at(tk(r), "per_task", "prompt_tokens"), 0)],
      ["output tokens per task", (r) => fmt(at(tk(r), "per_task", "output_tokens"), 0)],
      ["critical path: model (ms, mean)", (r) => fmt(at(tk(r), "critical_path_ms", "model"), 1)],
      ["critical path: tool (ms, mean)", (r) => fmt(at(tk(r), "critical_path_ms", "tool"), 1)],
      ["critical path: client (ms, mean)", (r) => fmt(at(tk(r), "critical_path_ms", "client"), 1)],
      ["critical path: queue (ms, mean)", (r) => fmt(at(tk(r), "critical_path_ms", "queue"), 1)],
      ["warm-up tasks (apart)", (r) => {
        const w = tk(r).warmup;
        const n = w && isNum(w.tasks) ? w.tasks : (r.tasks.records || {}).warmup;
        return fmt(n, 0) + (w && isNum(w.completion_p50_ms) ? ", completion p50 " + fmt(w.completion_p50_ms, 0) + " ms"
                                                             : "");
      }],
    ];
    // The judge's verdicts, where a run has judged steps or a judge.
    const judged = (r) => { const j = tk(r).judge; return j && (j.configured || j.judged > 0 || j.steps > 0); };
    if (taskRuns.some(judged))
      rows.push(["judge", (r) => {
        const j = tk(r).judge;
        if (!j) return "-";
        if (!j.configured && !(j.judged > 0))
          return j.steps > 0 ? "not run (" + fmt(j.steps, 0) + " judged steps, no --judge-target)" : "no judged steps";
        return fmt(j.judged, 0) + " judged: " + fmt(j.passed, 0) + " passed, " + fmt(j.rejected, 0) + " rejected, " +
               fmt(j.errors, 0) + " judge errors";
      }], ["judge latency p50 / p99 (ms)", (r) => {
        const j = tk(r).judge || {};
        return fmt(j.latency_p50_ms, 0) + " / " + fmt(j.latency_p99_ms, 0);
      }]);
    const byRun = (f) => taskRuns.flatMap((r) => f(r).map((row) => (multiTasks ? [r.name].concat(row) : row)));
    const head = (h) => (multiTasks ? ["run"].concat(h) : h);
    // Runs compared: the name after the run's is text, left-aligned too.
    const named = multiTasks ? "tasktable named" : "tasktable";
    // Failures: per class the failed steps (final failures), the tasks they
    // failed and the attempts retried; per step the tasks it failed.
    const failureRows = byRun((r) => {
      const s = tk(r), classes = new Set();
      for (const k of ["failures_by_class", "tasks_failed_by_class", "retried_by_class"])
        for (const c of Object.keys(s[k] || {})) classes.add(c);
      const n = (k, c) => ((s[k] || {})[c] || 0);
      return [...classes].sort((a, b) => n("failures_by_class", b) - n("failures_by_class", a) || (a < b ? -1 : 1))
                         .map((c) => [c, fmt(n("failures_by_class", c), 0), fmt(n("tasks_failed_by_class", c), 0),
                                      fmt(n("retried_by_class", c), 0)]);
    });
    const stepShown = 20;
    const stepRows = byRun((r) => {
      const all = Object.entries(tk(r).failures_by_step || {}).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
      const out = all.slice(0, stepShown).map(([k, v]) => [k, fmt(v, 0)]);
      if (all.length > stepShown)
        out.push([(all.length - stepShown) + " more steps", fmt(all.slice(stepShown).reduce((a, x) => a + x[1], 0), 0)]);
      return out;
    });
    const toolRows = byRun((r) => Object.entries(tk(r).tool_latency || {}).map(([name, t]) => {
      const inj = (tk(r).tools_injected || {})[name] || {};
      const errors = ["http_5xx", "timeout", "malformed", "invalid_arguments"].reduce((a, k) => a + (inj[k] || 0), 0);
      return [name, fmt(t.calls, 0), fmt(t.p50_ms, 2), fmt(t.p99_ms, 2), fmt(errors, 0)];
    }));
    const verdict = (ok) => el("span", {class: "verdict " + (ok ? "v-pass" : "v-bad")}, ok ? "pass" : "FAIL");
    const classRows = byRun((r) => Object.entries(tk(r).by_class || {}).map(([name, c]) => {
      const slo = c.slo;
      let target = "no SLO", rate = "-";
      if (slo) {
        target = isNum(slo.task_ms) ? "p" + fmt(slo.percentile, 0) + " " +
                     (isNum(slo.task_ms_at_percentile) ? fmt(slo.task_ms_at_percentile, 0) : "past the failed tasks") +
                     " / " + fmt(slo.task_ms, 0) + " ms" : "-";
        rate = isNum(slo.pass_rate) ? pct(c.pass_rate) + " / " + pct(slo.pass_rate) : "-";
      }
      return [name || "(none)", fmt(c.tasks, 0), fmt(c.ok, 0), fmt(c.failed, 0), fmt(c.cancelled, 0), pct(c.pass_rate),
              withCi(at(c, "completion_ms", "p50")), withCi(at(c, "completion_ms", "p99")), target, rate,
              slo ? verdict(!!slo.met) : "-"];
    }));
    const tables = el("div", {class: "tables"},
                      el("div", {}, el("h3", {}, "Tasks"),
                         table(["metric"].concat(taskRuns.map((r) => r.name)),
                               rows.map(([label, f]) => [label].concat(taskRuns.map(f))), "tasktable")),
                      el("div", {},
                         el("h3", {}, "Failures by class"),
                         failureRows.length
                             ? table(head(["failure class", "failed steps", "tasks failed", "attempts retried"]),
                                     failureRows, named)
                             : el("p", {class: "empty"}, "No step failed."),
                         stepRows.length ? el("h3", {}, "Failed tasks by step") : null,
                         stepRows.length ? table(head(["step", "tasks failed there"]), stepRows, named) : null,
                         toolRows.length ? el("h3", {}, "Tool latency (calls that ended ok)") : null,
                         toolRows.length ? table(head(["tool", "calls", "p50 (ms)", "p99 (ms)", "errors injected"]),
                                                 toolRows, named) : null));
    const classBox = classRows.length
        ? el("div", {}, el("h3", {}, "Per task class and its SLO"),
             table(head(["class", "tasks", "ok", "failed", "cancelled", "pass rate", "completion p50 (ms)",
                         "completion p99 (ms)", "SLO: task time at its percentile / target", "SLO: pass rate / target",
                         "SLO"]),
                   classRows, named))
        : null;
    const notes = taskRuns.filter((r) => !r.tasks.summary)
                          .map((r) => el("div", {class: "box note"}, (multiTasks ? r.name + ": " : "") +
                                         "run.json has no tasks summary (a run cut short): the counts come from " +
                                         "tasks.jsonl; completion times, failures and the rest are not there."));
    const kinds = [["model", "#2563eb", "model call"], ["tool", "#f59e0b", "tool call"],
                   ["retrieval", "#16a34a", "retrieval"], ["other", "#9333ea", "other step"]];
    const kindColour = Object.fromEntries(kinds.map(([k, c]) => [k, c]));
    const spans = [["ok", "#e2e8f0", "task ok (its span)"], ["failed", "#fecaca", "task failed"],
                   ["cancelled", "#fde68a", "task cancelled"]];
    const spanColour = Object.fromEntries(spans.map(([k, c]) => [k, c]));
    const swatch = (c, t, outline) => {
      const sw = el("span", {class: "swatch"});
      sw.style.background = c;
      if (outline) sw.style.outline = "2px solid " + outline;
      return el("span", {}, sw, t);
    };
    const legend = el("div", {class: "legend"}, ...kinds.map(([k, c, t]) => swatch(c, t)),
                      ...spans.map(([k, c, t]) => swatch(c, t)), swatch("#ffffff", "failed step", "#dc2626"));
    const box = el("div", {class: "charts wide"});
    const sec = section("Agentic tasks", "Tasks of the run's workload (tasks.jsonl, run.json tasks; docs/tasks.md): " +
                        "outcomes and completion times of the tasks after the warm-up (warm-up tasks apart), where " +
                        "they failed, and a waterfall of tasks with their steps on the run's time axis.",
                        ...notes.concat([tables, classBox, legend, box]).filter((x) => x));
    sec.id = "tasks";
    // Steps of a row in lanes: a step goes in the first lane free at its
    // start, so that steps run in parallel (a task's graph) are drawn one
    // above the other; at most 4 lanes, more share the lane that frees first.
    const laneRows = (rows) => rows.map((t) => {
      const steps = (t.steps || []).filter((x) => isNum(x.start_s))
                                   .map((x) => Object.assign({end: isNum(x.end_s) ? x.end_s : x.start_s}, x))
                                   .sort((a, b) => a.start_s - b.start_s);
      const ends = [];
      for (const x of steps) {
        let j = ends.findIndex((e) => e <= x.start_s);
        if (j < 0 && ends.length < 4) j = ends.push(-Infinity) - 1;
        if (j < 0) j = ends.indexOf(Math.min(...ends));
        ends[j] = Math.max(ends[j], x.end);
        x.lane = j;
      }
      // A step that ran beside no other takes the row's whole height.
      for (const x of steps) x.alone = !steps.some((o) => o !== x && o.start_s < x.end && o.end > x.start_s);
      // Drawn longest first, so that a short step (a tool call between two
      // model calls) lies on top of its neighbours, not under them.
      const drawOrder = steps.slice().sort((a, b) => (b.end - b.start_s) - (a.end - a.start_s));
      return {t: t, steps: steps, drawOrder: drawOrder, lanes: Math.max(1, ends.length)};
    });
    taskRuns.forEach((r) => {
      const w = r.tasks.waterfall || {};
      const laid = laneRows(w.rows || []);
      if (!laid.length) {
        box.append(el("p", {class: "empty"}, (multiTasks ? r.name + ": " : "") + "no task started: no waterfall."));
        return;
      }
      let lo = Infinity, hi = -Infinity;
      for (const {t} of laid)
        for (const v of [t.sched_s, t.start_s, t.end_s]) if (isNum(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      const pad = (hi - lo) * 0.01 || 0.5;
      const n = laid.length;
      // Taller rows where steps ran side by side, so that each lane stays
      // a few pixels high.
      const rowPx = 15 + 3 * Math.max(...laid.map((x) => x.lanes));
      const label = (t) => "#" + t.id;
      const said = [];
      if (w.slowest) said.push("the " + w.slowest + " slowest (warm-up apart)");
      if (w.failed) said.push(w.failed + " of the other failed ones, evenly spread");
      if (w.sampled) said.push(w.sampled + " of the rest, evenly spread");
      const caption = (w.shown < w.tasks ? w.shown + " of " + w.tasks + " tasks: " + said.join(", ") + ". "
                                         : "Every task (" + w.tasks + "). ") +
                      "One row per task in start order; its span from start to end, shaded by outcome (a thin line " +
                      "before it: from when it was due), its steps on it coloured by kind, steps that ran at the same " +
                      "time one above the other, a failed step outlined in red. Hover for a step's name, outcome, " +
                      "failure and duration; drag to zoom." +
                      (w.started < w.loaded ? " " + (w.loaded - w.started) + " tasks never started are not drawn." : "") +
                      (laid.some((x) => x.t.steps_started > x.steps.length)
                           ? " At most " + w.max_steps + " steps of a task are drawn." : "");
      // Row i's bar: its centre, height and top, in CSS pixels of the plot
      // area (the cursor's) or, with canvas, in the canvas's pixels.
      const geometry = (u, i, canvas) => {
        const yc = u.valToPos(i, "y", canvas), rowH = Math.abs(u.valToPos(0, "y", canvas) - u.valToPos(1, "y", canvas));
        const bar = Math.max(canvas ? 3 * (window.devicePixelRatio || 1) : 3, rowH * 0.8);
        return {yc: yc, bar: bar, top: yc - bar / 2};
      };
      const tooltip = (u, left, top) => {
        const i = Math.round(u.posToVal(top, "y"));
        const row = laid[i];
        if (!row) return null;
        const g = geometry(u, i), t = row.t;
        if (top < g.top - 2 || top > g.top + g.bar + 2) return null;
        const lane = Math.min(row.lanes - 1, Math.max(0, Math.floor((top - g.top) / (g.bar / row.lanes))));
        const X = (v) => u.valToPos(v, "x");
        let best = null, dist = Infinity;
        for (const x of row.steps) {
          if (!x.alone && x.lane !== lane) continue;
          const a = X(x.start_s), b = X(x.end);
          const d = left < a ? a - left : left > b ? left - b : 0;
          if (d <= 3 && d < dist) { best = x; dist = d; }
        }
        const task = "task #" + t.id + (t.class ? " (" + t.class + ")" : "") + (t.warmup ? ", warm-up" : "");
        if (best)
          return task + "\nstep " + best.id + " · " + best.kind + " · " + best.name + "\n" + best.outcome +
                 (best.failure ? ": " + best.failure : "") + " · " + fmt(best.duration_ms, 1) + " ms" +
                 (best.attempts > 1 ? " · " + best.attempts + " attempts" : "") +
                 (best.retried && best.retried.length ? " (retried: " + best.retried.join(", ") + ")" : "");
        if (!isNum(t.start_s) || left < X(t.start_s) - 3 || left > X(t.end_s) + 3) return null;
        return task + "\n" + t.outcome + (t.failure ? ": " + t.failure : "") +
               (t.failed_step ? " at step " + t.failed_step : "") + " · " + fmt(t.duration_ms, 1) + " ms · " +
               t.steps_total + " steps" + (t.tenant && t.tenant !== "default" ? " · tenant " + t.tenant : "");
      };
      const u = drawnChart(box, (multiTasks ? r.name + ": " : "") + "Task waterfall", caption,
                           "time (s) from the run's start", "task (by start)", [lo - pad, hi + pad], [-0.6, n - 0.4],
                           (u, ctx) => {
                             const dpr = window.devicePixelRatio || 1;
                             const X = (v) => u.valToPos(v, "x", true);
                             laid.forEach((row, i) => {
                               const g = geometry(u, i, true), t = row.t;
                               const yc = g.yc, bar = g.bar, top = g.top;
                               if (isNum(t.sched_s) && isNum(t.start_s) && t.start_s > t.sched_s) {
                                 ctx.fillStyle = "#94a3b8";
                                 ctx.fillRect(X(t.sched_s), yc - dpr / 2, X(t.start_s) - X(t.sched_s), dpr);
                               }
                               if (isNum(t.start_s) && isNum(t.end_s)) {
                                 ctx.fillStyle = spanColour[t.outcome] || spanColour.ok;
                                 ctx.fillRect(X(t.start_s), top, Math.max(dpr, X(t.end_s) - X(t.start_s)), bar);
                               }
                               const lh = bar / row.lanes;
                               // A step is at least 2 px wide (a tool call of a
                               // millisecond in a run of minutes stays seen), its
                               // start a white line (a model call after a model
                               // call is told apart).
                               for (const x of row.drawOrder) {
                                 const x0 = X(x.start_s), failed = x.outcome === "failed";
                                 const wpx = Math.max(failed ? 3 * dpr : 2 * dpr, X(x.end) - x0);
                                 const split = row.lanes > 1 && !x.alone;
                                 const y0 = split ? top + x.lane * lh + 0.5 * dpr : top;
                                 const h = split ? Math.max(dpr, lh - dpr) : bar;
                                 ctx.fillStyle = kindColour[x.kind] || kindColour.other;
                                 ctx.fillRect(x0, y0, wpx, h);
                                 ctx.fillStyle = "#ffffff";
                                 if (wpx > 4 * dpr) ctx.fillRect(x0, y0, dpr, h);
                                 if (failed) {
                                   ctx.strokeStyle = "#dc2626";
                                   ctx.lineWidth = 2 * dpr;
                                   ctx.strokeRect(x0, y0, wpx, h);
                                 }
                               }
                             });
                           },
                           {yDir: -1, height: Math.max(220, rowPx * n + 80), ySize: 70,
                            width: Math.max(480, Math.min(1232, box.clientWidth || 620)),
                            ySplits: () => laid.map((x, i) => i),
                            yValues: (u, splits) => splits.map((v) => (laid[v] ? label(laid[v].t) : "")),
                            tooltip: tooltip});
      // Where a reader would hover to see a step's tooltip, in CSS pixels of
      // the plot area (the browser test, tests/blackbox/node/report_browser.mjs,
      // does); a function, as uPlot sizes the chart after it is built.
      const first = laid.findIndex((x) => x.steps.length);
      if (first >= 0)
        allCharts.find((c) => c.u === u).hover = () => {
          const x = laid[first].steps[0], g = geometry(u, first);
          return {x: (u.valToPos(x.start_s, "x") + u.valToPos(x.end, "x")) / 2,
                  y: x.alone ? g.yc : g.top + (x.lane + 0.5) * g.bar / laid[first].lanes};
        };
    });
  }

  // Decimals for about four significant digits (1234, 123.4, 12.34, 1.234).
  function sig(v) { const a = Math.abs(v); return a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : 3; }

  // ---- the regression checklist (check.json of a run: `tokenscope check BASE CAND`)
  const verdictClass = {"regressed": "v-bad", "improved": "v-good", "pass": "v-pass", "inconclusive": "v-unsure",
                        "no-data": "v-none"};
  function verdictCell(v) { return el("span", {class: "verdict " + (verdictClass[v] || "")}, v); }
  function changeText(f, v) {
    if (!isNum(v)) return v === null || v === undefined ? "-" : String(v);
    if (f.change_unit === "%") return (v >= 0 ? "+" : "") + (v * 100).toFixed(1) + "%";
    return fmt(v, 3) + (f.change_unit ? " " + f.change_unit : "");
  }
  function intervalText(f) {
    if (!isNum(f.ci_low) && !isNum(f.ci_high)) return "";
    return "[" + (isNum(f.ci_low) ? changeText(f, f.ci_low) : "-inf") + ", " +
           (isNum(f.ci_high) ? changeText(f, f.ci_high) : "+inf") + "]";
  }
  // The tolerance of a finding, from its threshold's words ("tolerance 10.0%",
  // "tolerance 5 ms"), in the finding's units; null when it has none.
  function toleranceOf(f) {
    const m = /tolerance ([0-9.eE+-]+)(%?)/.exec(f.threshold || "");
    if (!m) return null;
    const v = parseFloat(m[1]);
    return m[2] === "%" ? v / 100 : v;
  }
  // The target of a finding held against one ("target 200 ms": an SLO's
  // percentile), in the finding's units; null when it has none.
  function targetOf(f) {
    const m = /^target ([0-9.eE+-]+)/.exec(f.threshold || "");
    return m ? parseFloat(m[1]) : null;
  }
  // A row label of at most 36 characters (the axis has room for no more;
  // the table above has the whole name).
  function shortLabel(s) { return s.length > 36 ? s.slice(0, 35) + "\u2026" : s; }
  // One row per finding: its change as a point, its interval as a bar, the
  // tolerance band shaded and zero marked (a forest plot).
  function forestPlot(container, item) {
    const all = item.findings.filter((f) => isNum(f.change));
    if (!all.length) return;
    // Rows in different units are drawn in units of their tolerance (the
    // band is then [-1, 1] for every row); the table has the raw numbers.
    // When some row has no tolerance to scale by (an SLO's target), each
    // unit gets a chart of its own: one axis never carries two units.
    const units = [...new Set(all.map((f) => f.change_unit))];
    const scaled = units.length > 1 && all.every((f) => toleranceOf(f) > 0);
    const groups = units.length > 1 && !scaled ? units.map((un) => all.filter((f) => f.change_unit === un)) : [all];
    for (const fs of groups)
      forestChart(container, item, fs, scaled, groups.length > 1 ? " (" + (fs[0].change_unit || "no unit") + ")" : "");
  }
  function forestChart(container, item, fs, scaled, titleSuffix) {
    const units = [...new Set(fs.map((f) => f.change_unit))];
    const k = (f) => (scaled ? 1 / toleranceOf(f) : 1);
    let lo = 0, hi = 0;
    for (const f of fs) {
      for (const v of [f.change, f.ci_low, f.ci_high, targetOf(f)])
        if (isNum(v)) { lo = Math.min(lo, v * k(f)); hi = Math.max(hi, v * k(f)); }
      const t = toleranceOf(f);
      if (t !== null) { lo = Math.min(lo, -t * k(f)); hi = Math.max(hi, t * k(f)); }
    }
    const pad = (hi - lo) * 0.08 || 1;
    const pctAxis = !scaled && units.length === 1 && units[0] === "%";
    const targets = fs.some((f) => targetOf(f) !== null);
    const n = fs.length;
    drawnChart(container, item.number + " " + item.title + titleSuffix,
               "Each finding's change (dot) with its interval (bar); " +
               "the shaded band is its tolerance, the line zero; red: regressed, green: improved, blue: pass, " +
               "amber: inconclusive." + (scaled ? " Rows differ in units: each is drawn in units of its tolerance." : "") +
               (targets ? " A row held against a target (an SLO's percentile) shows its value, the target a black tick." : ""),
               scaled ? "change / tolerance" : pctAxis ? "change (%)" : "change" + (units[0] ? " (" + units[0] + ")" : ""),
               "finding", [lo - pad, hi + pad], [-0.5, n - 0.5], (u, ctx) => {
                 const X = (v) => u.valToPos(v, "x", true), Y = (v) => u.valToPos(v, "y", true);
                 const px = devicePixelRatio || 1;
                 fs.forEach((f, i) => {
                   const y = Y(n - 1 - i), t = toleranceOf(f), target = targetOf(f);
                   if (t !== null) {
                     ctx.fillStyle = "rgba(34,197,94,0.14)";
                     ctx.fillRect(X(-t * k(f)), y - 9 * px, X(t * k(f)) - X(-t * k(f)), 18 * px);
                   }
                   if (target !== null) {
                     ctx.fillStyle = "#111827";
                     ctx.fillRect(X(target * k(f)) - px, y - 10 * px, 2 * px, 20 * px);
                   }
                   const colour = f.verdict === "regressed" ? "#dc2626" : f.verdict === "improved" ? "#16a34a" :
                                  f.verdict === "pass" ? "#2563eb" : "#a16207";
                   ctx.strokeStyle = colour;
                   ctx.fillStyle = colour;
                   ctx.lineWidth = 2 * px;
                   if (isNum(f.ci_low) || isNum(f.ci_high)) {
                     const a = isNum(f.ci_low) ? X(f.ci_low * k(f)) : u.bbox.left;
                     const b = isNum(f.ci_high) ? X(f.ci_high * k(f)) : u.bbox.left + u.bbox.width;
                     ctx.beginPath(); ctx.moveTo(a, y); ctx.lineTo(b, y); ctx.stroke();
                   }
                   ctx.beginPath(); ctx.arc(X(f.change * k(f)), y, 4 * px, 0, 2 * Math.PI); ctx.fill();
                 });
                 ctx.strokeStyle = "#64748b";
                 ctx.lineWidth = px;
                 ctx.beginPath(); ctx.moveTo(X(0), u.bbox.top); ctx.lineTo(X(0), u.bbox.top + u.bbox.height); ctx.stroke();
               }, {height: Math.max(130, 70 + 34 * n), ySize: 240,
                   ySplits: () => fs.map((f, i) => n - 1 - i),
                   yValues: (u, splits) => splits.map((v) => { const f = fs[n - 1 - v]; return f ? shortLabel(f.metric) : ""; }),
                   xValues: pctAxis ? (u, s) => s.map((v) => (v * 100).toFixed(0) + "%") : undefined});
  }
  // Item 11's evidence: each histogram of the base and the candidate over
  // the same bins, as densities (each run's share of its values per unit of
  // the value: runs of different sizes, and bins of different widths,
  // compare), the base filled, the candidate a line, with its divergence and
  // verdict beside it.
  function histogramChart(container, h, more) {
    const edges = h.edges || [], base = h.base || [], cand = h.candidate || [];
    const k = base.length;
    if (k < 1 || cand.length !== k || edges.length !== k + 1) return;
    // An unbounded end bin (null edge: the logprobs' underflow bin) is drawn
    // as wide as its neighbour.
    const x = edges.slice();
    let open = null;
    if (x[0] === null && k > 1 && isNum(x[1]) && isNum(x[2])) { x[0] = x[1] - (x[2] - x[1]); open = "low"; }
    if (x[k] === null && k > 1 && isNum(x[k - 1]) && isNum(x[k - 2])) {
      x[k] = x[k - 1] + (x[k - 1] - x[k - 2]);
      open = "high";
    }
    if (!x.every(isNum)) return;
    const total = (v) => v.reduce((a, b) => a + (isNum(b) ? b : 0), 0);
    const nb = total(base), nc = total(cand);
    const density = (v, n) => v.map((c, i) => (n > 0 && isNum(c) ? c / n / (x[i + 1] - x[i]) : 0));
    const db = density(base, nb), dc = density(cand, nc);
    // Bins empty in both runs at either end are left out.
    let first = 0, last = k - 1;
    while (first < last && !(base[first] > 0) && !(cand[first] > 0)) first++;
    while (last > first && !(base[last] > 0) && !(cand[last] > 0)) last--;
    const trimmed = first > 0 || last < k - 1;
    // A step line per run: up from zero at the first edge, each bin's
    // density up to its upper edge, down to zero at the last edge.
    const xs = [x[first]], yb = [0], yc = [0];
    for (let i = first; i <= last; i++) { xs.push(x[i]); yb.push(db[i]); yc.push(dc[i]); }
    xs.push(x[last + 1]);
    yb.push(0);
    yc.push(0);
    const name = typeof h.name === "string" && h.name ? h.name : "histogram";
    const logprobs = /logprob/.test(name);
    const unit = h.unit || "";
    const per = unit === "nats" ? "nat" : unit || "unit";
    const what = logprobs ? "tokens" : "values";
    const statistic = "D(base ‖ candidate) " + si(h.kl_bits) + " bits against a threshold of " + si(h.threshold_bits) +
                      " bits; the base's split-half KL (what sampling alone gives) " + si(h.split_half_kl_bits) + " bits";
    const ends = (open === "low" && first === 0 ? " The leftmost bin holds everything below " + si(edges[1]) +
                                                  " (drawn as wide as the next)." : "") +
                 (open === "high" && last === k - 1 ? " The rightmost bin holds everything above " +
                                                      si(edges[k - 1]) + " (drawn as wide as the one before)." : "");
    const box = chartBox(container, "11 " + name + ": base and candidate",
                         "Each run's share of its " + what + " per " + per + " in each bin (base filled, candidate a " +
                         "line), of " + si(nb) + " base and " + si(nc) + " candidate " + what + "." + ends +
                         (trimmed ? " Bins empty in both runs at the ends are left out." : ""));
    box.append(el("div", {class: "stat"}, verdictCell(typeof h.verdict === "string" ? h.verdict : "-"),
                  " " + statistic + (more ? ". " + more : "")));
    const o = {
      width: width(container),
      height: 230,
      // A little room either side, so that the outline's first and last
      // edges are not on the plot's border.
      scales: {x: {time: false, range: (u, min, max) => [min - (max - min) * 0.02, max + (max - min) * 0.02]},
               y: {range: (u, min, max) => [0, (max > 0 ? max : 1) * 1.05]}},
      axes: [{label: (logprobs ? "logprob" : "value") + (unit ? " (" + unit + ")" : ""), labelSize: 20,
              values: axisValues},
             {label: "density (per " + per + ")", labelSize: 20, size: 56, values: axisValues}],
      series: [{label: "value"},
               {label: "base", stroke: palette[0], fill: "rgba(37,99,235,0.18)", width: 1.5,
                paths: uPlot.paths.stepped({align: 1}), points: {show: false}},
               {label: "candidate", stroke: palette[1], width: 1.5, paths: uPlot.paths.stepped({align: 1}),
                points: {show: false}}],
      legend: {live: true},
    };
    const u = new uPlot(o, [xs, yb, yc], box);
    register(u, false);
    return u;
  }
  function histogramCharts(container, item) {
    const e = item.evidence || {};
    const all = Array.isArray(e.histograms) ? e.histograms.filter((h) => h && typeof h === "object") : [];
    if (!all.length) return;
    // check writes at most eight tensors' charts, the most divergent first;
    // a check.json written otherwise is held to the same.
    const isLogprobs = (h) => /logprob/.test(typeof h.name === "string" ? h.name : "");
    const cap = 8;
    const tensors = all.filter((h) => !isLogprobs(h));
    const hs = all.filter(isLogprobs).concat(tensors.slice(0, cap));
    const a = e.activation_charts && typeof e.activation_charts === "object" ? e.activation_charts : null;
    const count = (v) => (isNum(v) && v > 0 ? v : 0);
    const pastCap = (a ? count(a.past_cap) : 0) + Math.max(0, tensors.length - cap);
    const overBins = a ? count(a.over_max_bins) : 0;
    const left = pastCap + overBins;
    const compared = a && isNum(a.compared) ? a.compared : tensors.length;
    const why = [];
    if (pastCap > 0) why.push(pastCap + " less divergent than the " + Math.min(cap, tensors.length) + " drawn");
    if (overBins > 0)
      why.push(overBins + " with more than " + (isNum(a.max_bins) ? a.max_bins.toLocaleString("en") : "the most") +
               " bins");
    const said = ["Base and candidate over the same bins" +
                  (tensors.length ? "; activation tensors most divergent first" : "")];
    if (typeof e.divergence === "string" && e.divergence) said.push(e.divergence);
    if (left > 0)
      said.push(left + " of the " + compared + " tensors compared are not drawn (" + why.join(", ") +
                "): their KL is in the forest plot above");
    container.append(el("div", {class: "span"}, el("h4", {}, "11 " + item.title + ": the histograms compared"),
                        el("p", {class: "sub"}, said.join(". ") + ".")));
    // The logprobs' chart also says how the mean logprob moved, and where
    // the candidate stands against the base in latency and accuracy.
    const m = e.mean_logprob, pa = e.pareto;
    const logprobMore = [];
    if (m && isNum(m.change))
      logprobMore.push("Mean logprob per request " + si(m.base) + " → " + si(m.candidate) + " nats (change " +
                       si(m.change) + (isNum(m.ci_low) && isNum(m.ci_high) ? " [" + si(m.ci_low) + ", " + si(m.ci_high) +
                                                                             "]" : "") + ")");
    if (pa && pa.relation && pa.relation !== "unknown")
      logprobMore.push("p50 TPOT " + si(pa.base && pa.base.tpot_p50_ms) + " → " +
                       si(pa.candidate && pa.candidate.tpot_p50_ms) + " ms: the candidate " +
                       ({dominated: "is slower and less accurate (dominated)",
                         dominates: "is faster and more accurate (dominates)", equal: "is equal in both",
                         "trade-off": "trades one for the other"}[pa.relation] || pa.relation));
    for (const h of hs) histogramChart(container, h, isLogprobs(h) ? logprobMore.join("; ") : "");
  }
  runs.forEach((run) => {
    const c = run.check;
    if (!c || !Array.isArray(c.items)) return;
    const box = el("div", {});
    box.append(el("p", {}, "Overall: ", verdictCell(c.overall), c.mode === "single"
                   ? " (one run: " + c.candidate + "'s health)" : " (base " + c.base + ", candidate " + c.candidate + ")"));
    // Validity first: what differed between the runs' environments.
    if (c.environment && Array.isArray(c.environment.differences)) {
      if (c.environment.differs)
        box.append(el("div", {class: "box note"}, el("b", {}, "Environment differs"),
                      " \u2014 a reason to distrust the comparison, not the candidate's regression:"),
                   table(["what", "base", "candidate", "why it matters"],
                         c.environment.differences.map((d) => [d.what, d.base, d.candidate, d.note]), "checktable"));
      else
        box.append(el("p", {class: "sub"}, "Environment: the same, as far as the runs recorded it (host, clock " +
                      "source, CPU pressure and steal, the server's identity)."));
    }
    // The headline (item 0): every row, first.
    const hl = c.items.find((it) => it.id === "headline");
    if (hl && (hl.findings || []).length) {
      const val = (f, v) => isNum(v) ? fmt(v, sig(v)) + (f.unit && f.unit !== "ratio" ? " " + f.unit : "") : "-";
      box.append(el("h3", {}, "Headline: ", verdictCell(hl.verdict)),
                 table(["statistic", "base", "candidate", "change", "interval", "verdict", "threshold"],
                       hl.findings.map((f) => [f.metric, val(f, f.base), val(f, f.value), changeText(f, f.change),
                                                intervalText(f), verdictCell(f.verdict), f.threshold]),
                       "checktable headline"));
    }
    if (c.family && c.family.size > 0 && c.family.alpha > 0)
      box.append(el("p", {class: "sub"}, "Family-wise error " + c.family.alpha + " over the " + c.family.size +
                    " findings judged on an interval (Holm's procedure): a row whose p-value misses its bound is " +
                    "inconclusive, not regressed (docs/check.md)."));
    const rows = [];
    for (const it of c.items) {
      if (it.id === "headline") continue;
      // An item without data shows why (its summary), not its decisive finding.
      const f = it.verdict !== "no-data" && it.decisive !== null && it.decisive !== undefined
                    ? it.findings[it.decisive] : null;
      rows.push([String(it.number), it.title, verdictCell(it.verdict), f ? f.metric : it.summary,
                 f ? changeText(f, f.change) : "", f ? intervalText(f) : "", f ? f.threshold : "",
                 f && isNum(f.more_requests) && f.more_requests > 0 ? "~" + f.more_requests + " more requests" : ""]);
    }
    box.append(table(["#", "item", "verdict", "statistic", "change", "interval", "threshold", ""], rows, "checktable"));
    const charts = el("div", {class: "charts"});
    box.append(charts);
    for (const it of c.items) {
      if (it.findings && it.findings.some((f) => isNum(f.change))) forestPlot(charts, it);
      if (it.id === "quantization") histogramCharts(charts, it);
    }
    // Item 5's evidence: the windows' series with their change points.
    const lc = c.items.find((it) => it.id === "lifecycle");
    if (lc && lc.evidence && lc.evidence.candidate) {
      for (const [key, label, unit] of [["output_tokens_per_s", "output tokens/s per window", "tok/s"],
                                        ["tpot_p50_ms", "median TPOT per window", "ms"]]) {
        const lines = [];
        for (const who of ["base", "candidate"]) {
          const e = lc.evidence[who];
          if (e && e.t_s) lines.push({label: who, x: e.t_s, y: e[key]});
        }
        lineChart(charts, "5 lifecycle: " + label, "Per window of the run; change points (E-divisive) at " +
                  ["base", "candidate"].filter((w) => lc.evidence[w]).map((w) => w + " " +
                    JSON.stringify((lc.evidence[w]["change_points_" + (key.startsWith("output") ? "tokens" : "tpot")] || [])
                      .map((k) => Math.round(lc.evidence[w].t_s[k])))).join(", ") + " s.", "time (s)", unit, lines);
      }
    }
    // Attribution: what moves ITL and throughput within the run.
    const at = c.attribution && c.attribution.candidate;
    if (at && at.rows && at.rows.length) {
      const est = (e) => fmt(e.estimate, 3) + " [" + fmt(e.ci_low, 3) + ", " + fmt(e.ci_high, 3) + "]";
      box.append(el("h3", {}, "Attribution" + (c.mode === "single" ? "" : " (candidate)")),
                 el("p", {class: "sub"}, "The effect on each outcome per unit of each cause, over " + at.windows +
                    " windows of " + fmt(at.window_s, 2) + " s (" + at.source + "): double machine learning with " +
                    "cross-fitting, the other causes and the load as controls, beside the naive regression of the " +
                    "outcome on the cause alone. Where they differ, confounding moved the naive estimate."),
                 table(["outcome", "cause", "DML [95% interval]", "naive [95% interval]", "naive, adjusted"],
                       at.rows.map((r) => [r.outcome + " (" + r.outcome_unit + ")", r.cause + " (" + r.cause_unit + ")",
                                           est(r.dml), est(r.naive), est(r.naive_adjusted)])));
      for (const n of at.notes || []) box.append(el("div", {class: "box note"}, n));
    }
    section("Regression checklist" + (multi ? ": " + run.name : ""),
            "tokenscope check (check.json): each item's verdict with the statistic behind it, its interval and the " +
            "threshold it was held against; regressed only when significant and beyond the tolerance.", box);
  });

  // ---- over time
  const tl = (r) => r.timeline;
  const T = "time (s)";
  if (runs.length) {
    const timeBox = el("div", {class: "charts"});
    const phaseNames = [...new Set(phases.map((p) => p.phase))];
    section("Over time", "Seconds from the run's start on one axis for every chart below: drag across any of them " +
            "to zoom all, double-click to reset." +
            (phaseNames.length ? " Shaded: the lifecycle phases " + phaseNames.join(", ") + " (from check" +
                                 (phaseRuns.length > 1 ? "; each run's in a band of its own, from the top: " +
                                  phaseRuns.map((r) => r.name).join(", ") : multi ? ", of run " + phaseRuns[0].name : "") +
                                 ")." : ""),
            timeBox);
    // One colour per run when runs are overlaid (dashes tell the lines of a
    // run apart), one per line otherwise.
    let lineNo = 0;
    const tline = (r, i, key, what, dash) => {
      const k = lineNo++;
      const lk = look(i, k);
      return {label: runLabel(r, what), x: tl(r).t_s, y: tl(r)[key], color: lk.color,
              dash: multi ? lk.dash : dash};
    };
    const chartStart = () => { lineNo = 0; };
    // Per run, its lines are numbered from 0 again.
    const perRun = (f) => runs.flatMap((r, i) => { lineNo = 0; return f(r, i); });
    const w = (r) => fmt(tl(r).window_s, 1) + " s";
    chartStart();
    lineChart(timeBox, "Request rate", "Requests per second per window: planned (dashed) by the schedule, completed " +
              "and failed (dotted) by their end. Completed below planned means the server fell behind.", T,
              "requests/s", perRun((r, i) => [tline(r, i, "planned_rps", "planned", [6, 4]),
                                                    tline(r, i, "completed_rps", "completed"),
                                                    tline(r, i, "failed_rps", "failed", [2, 2])]), {time: true});
    chartStart();
    lineChart(timeBox, "Requests in flight", "Requests sent and not yet closed at the end of each window. A rising " +
              "line means arrivals outpace completions. Dotted: the hidden queue, the requests in flight that the " +
              "server's running and waiting gauges do not show (llama-server's HTTP queue), mean per window.", T,
              "requests", perRun((r, i) => [tline(r, i, "in_flight"), tline(r, i, "hidden_queue", "hidden queue", [2, 2])]),
              {time: true});
    chartStart();
    lineChart(timeBox, "TTFT per window", "p50 (solid) and p99 (dashed) time to first token of the requests whose " +
              "first token came in each window.", T, "TTFT (ms)",
              perRun((r, i) => [tline(r, i, "ttft_p50_ms", "p50"), tline(r, i, "ttft_p99_ms", "p99", [6, 4])]),
              {time: true});
    chartStart();
    lineChart(timeBox, "Token latency per window", "Per window of request ends: TPOT p50 (solid), TPOT p99 (dashed) " +
              "and the p99 of each request's longest inter-token gap (dotted): stalls show in the dotted line.", T,
              "ms per token", perRun((r, i) => [tline(r, i, "tpot_p50_ms", "TPOT p50"),
                                                      tline(r, i, "tpot_p99_ms", "TPOT p99", [6, 4]),
                                                      tline(r, i, "itl_max_p99_ms", "longest gap p99", [2, 2])]),
              {time: true});
    chartStart();
    lineChart(timeBox, "Send lag", "How late the client sent requests after they could be sent (when due, or when " +
              "they got a slot under --max-concurrency), p99 (solid) and max (dashed) per window. Above a few ms " +
              "the client, not the server, is the bottleneck.", T,
              "send lag (ms)", perRun((r, i) => [tline(r, i, "send_lag_p99_ms", "p99"),
                                                       tline(r, i, "send_lag_max_ms", "max", [6, 4])]), {time: true});
    chartStart();
    lineChart(timeBox, "Output token throughput", "Output tokens of the requests that ended in each window, per " +
              "second (windows of " + runs.map(w).join(", ") + ").", T, "tokens/s",
              perRun((r, i) => [tline(r, i, "output_tokens_per_s")]), {time: true});
    const tenantLines = [];
    runs.forEach((r, i) => (tl(r).completed_rps_by_tenant || []).forEach((t, k) => tenantLines.push(
        Object.assign({label: runLabel(r, t.tenant), x: tl(r).t_s, y: t.completed_rps}, look(i, k)))));
    if (tenantLines.length)
      lineChart(timeBox, "Completed requests per tenant", "Requests per second that completed in each window, one " +
                "line per tenant (the busiest eight; the rest summed). A tenant whose line drops while others hold " +
                "is being starved.", T, "requests/s", tenantLines, {time: true});
  }

  // ---- sampled series (samples.jsonl)
  const known = [
    [["requests_running", "requests_waiting", "requests_swapped"], "Server batch and queue",
     "Requests running in the batch and waiting to be scheduled, as the server reports them. Waiting that grows " +
     "is a queue building up.", "requests"],
    [["kv_cache_usage"], "KV-cache usage", "Share of the KV cache in use. Near 1 the server preempts or queues.",
     "fraction"],
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
  if (runs.length) {
    const seriesBox = el("div", {class: "charts"});
    section("Server, GPU and host", "As sampled into samples.jsonl, on the same time axis: the server's own " +
            "metrics, then GPU, host, server process and cgroup.", seriesBox);
    const label = (e) => runLabel(e.run, [e.s.name, e.s.source !== "server" ? e.s.source : "", e.s.labels]
                                             .filter((x) => x).join(" "));
    const used = new Set();
    let drawn = 0;
    for (const [names, title, caption, unit] of known) {
      const lines = [];
      const kth = new Map();  // per run, its lines numbered from 0
      names.forEach((n) => (byName.get(n) || []).forEach((e) => {
        const k = kth.get(e.index) || 0;
        kth.set(e.index, k + 1);
        lines.push(Object.assign({label: label(e), x: e.s.x, y: e.s.y}, look(e.index, k)));
      }));
      names.forEach((n) => used.add(n));
      if (lines.length) {
        lineChart(seriesBox, title, caption, T, unit, lines,
                  {time: true, yRange: unit === "fraction" ? [0, 1] : undefined});
        drawn++;
      }
    }
    // The rest, one chart per quantity: a server histogram's per-window
    // quantiles and mean share one chart (server_ttft_seconds: p50, p90,
    // p99, mean); its observations per second are left out
    // (requests_finished_per_s says the same), except iteration_tokens'
    // (engine steps per second).
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
            ? "The server's histogram over each sampling window: p50, p90, p99 (interpolated within the " +
              "server's own bucket bounds, so as coarse as they are) and mean of what it observed then."
            : "As sampled" + (first.type === "derived" ? ", per window against the previous read" : "") +
              "; one line per source and label set.";
        const kth = new Map();
        const lines = entries.map((x) => {
          const k = kth.get(x.e.index) || 0;
          kth.set(x.e.index, k + 1);
          const lk = look(x.e.index, k);
          return {label: quantiles ? runLabel(x.e.run, x.what + (x.e.s.labels ? " " + x.e.s.labels : "")) : label(x.e),
                  x: x.e.s.x, y: x.e.s.y, color: lk.color,
                  dash: multi ? lk.dash : (x.what === "mean" ? [6, 4] : undefined)};
        });
        const shown = prefix && key.startsWith(prefix) ? key.slice(prefix.length) : key;
        lineChart(seriesBox, (what ? what + ": " : "") + shown.replace(/_/g, " "), caption, T, first.unit || "value",
                  lines, {time: true});
        drawn++;
      }
    if (!drawn) seriesBox.append(el("div", {class: "empty"}, "No sampled series: no run has samples.jsonl."));
  }

  // ---- sim --plan: the fleets tried, GPUs against goodput and the p99s
  const planRuns = runs.map((r, i) => [r, i]).filter(([r]) => r.plan && (r.plan.points || []).length);
  for (const [r, i] of planRuns) {
    const p = r.plan, pts = p.points;
    const pooled = Array.isArray(p.pools);
    const cost = isNum(p.gpu_cost_per_hour) || p.objective === "cost_per_hour";
    const box = el("div", {class: "charts"});
    // In the pools file's order (run.json's objects have their keys sorted).
    const mix = (c) => (p.pools || []).filter((q) => c && q.name in c).map((q) => q.name + "=" + fmt(c[q.name], 0))
        .join(" ");
    const rows = pts.map((q) => (pooled ? [mix(q.counts)] : []).concat([fmt(q.replicas, 0), fmt(q.gpus, 0)])
                     .concat(cost ? [fmt(q.cost_per_hour, 2)] : [])
                     .concat([fmt(q.goodput_rps, 2), fmt(q.request_throughput_rps, 2), fmt(q.requests_failed, 0),
                              fmt(q.ttft_p99_ms, 1), fmt(q.tpot_p99_ms, 1), fmt(q.e2e_p99_ms, 1),
                              q.pass ? "met" : "missed"]));
    const choice = p.interrupted ? "The search was interrupted: no fleet chosen."
        : pooled ? (p.cheapest_counts ? "The " + (p.objective === "cost_per_hour" ? "cheapest" : "fewest-GPU") +
                    " mix meeting every SLO: " + mix(p.cheapest_counts) + " (" + fmt(p.smallest_gpus, 0) + " GPUs" +
                    (isNum(p.cheapest_cost_per_hour) ? ", $" + fmt(p.cheapest_cost_per_hour, 2) + " an hour" : "") +
                    ")." : "No mix of the pools met every SLO.")
        : isNum(p.smallest_replicas)
        ? "The fewest replicas meeting every SLO: " + fmt(p.smallest_replicas, 0) + " (" + fmt(p.smallest_gpus, 0) +
          " GPUs)."
        : "No fleet of up to " + fmt(p.max_replicas, 0) + " replicas met every SLO.";
    const sloText = Object.entries(p.slos || {}).map(([cls, t]) => cls + ": " + Object.entries(t)
        .filter(([k]) => k !== "percentile").map(([k, v]) => k.replace(/_ms$/, "") + " p" + fmt(t.percentile, 0) +
                                                   " ≤ " + fmt(v, 0) + " ms").join(", ")).join("; ");
    section("Fleet plan" + (multi ? ": " + r.name : ""),
            "sim --plan, router " + p.router + ", SLOs " + (sloText || "-") + ": each fleet tried " +
            (pooled ? "(each mix of the pools but the last, the last pool's replicas bisected). "
                    : "(replicas doubled, then bisected). ") + choice +
            (p.monotone === false ? " A fleet missed with more replicas than one that met: the search may not " +
                                    "have found the smallest." : ""),
            table((pooled ? ["mix"] : []).concat(["replicas", "GPUs"]).concat(cost ? ["$/hour"] : []).concat(["goodput (req/s)", "req/s",
                  "failed", "TTFT p99 (ms)", "TPOT p99 (ms)", "E2E p99 (ms)", "SLOs"]), rows), box);
    // By GPUs; a plan over priced pools by the cost per hour (mixes of one
    // price differ in their GPUs): the points in the order of the axis.
    const byCost = pooled && p.objective === "cost_per_hour";
    const xOf = (q) => byCost ? q.cost_per_hour : q.gpus;
    const sorted = pts.slice().sort((a, b) => xOf(a) - xOf(b));
    const xs = sorted.map(xOf), axis = byCost ? "$/hour" : "GPUs", what = byCost ? "cost per hour" : "GPUs";
    const lk = look(i, 0);
    lineChart(box, "Goodput by " + axis, "Requests per second that met every SLO, by the fleet's " + what + ".",
              axis, "req/s",
              [{label: "goodput", x: xs, y: sorted.map((q) => q.goodput_rps), color: lk.color},
               {label: "throughput", x: xs, y: sorted.map((q) => q.request_throughput_rps), color: lk.color,
                dash: [6, 4]}]);
    lineChart(box, "p99 latency by " + axis, "TTFT (solid) and E2E (dashed) p99 of each fleet tried.", axis, "ms",
              [{label: "TTFT p99", x: xs, y: sorted.map((q) => q.ttft_p99_ms), color: lk.color},
               {label: "E2E p99", x: xs, y: sorted.map((q) => q.e2e_p99_ms), color: lk.color, dash: [6, 4]}]);
  }

  // ---- sim: per engine step (steps.jsonl)
  const stepRuns = runs.map((r, i) => [r, i]).filter(([r]) => r.steps && (r.steps.series || []).length);
  if (stepRuns.length) {
    const box = el("div", {class: "charts"});
    section("Simulator steps", "Every engine step of the simulator (steps.jsonl), reduced to the first, lowest, " +
            "highest and last step per pixel column, on the same time axis.", box);
    const stepLine = (r, i, name, what, k, dash) => {
      const s = (r.steps.series || []).find((x) => x.name === name);
      const lk = look(i, k);
      return s ? {label: runLabel(r, what), x: s.x, y: s.y, color: lk.color, dash: multi ? lk.dash : dash}
               : {x: []};
    };
    const charts = [
      ["Batch per step", "Sequences in each step's batch (solid), requests running (dashed) and waiting (dotted) " +
       "after it. Waiting above zero while the batch is not full means the KV cache, not the batch limit, holds " +
       "requests back.", "requests", [["batch_seqs", "batch", undefined], ["running", "running", [6, 4]],
                                      ["waiting", "waiting", [2, 2]]]],
      ["KV-cache usage per step", "Share of the KV-cache blocks in use after each step.", "fraction",
       [["kv_usage", "KV usage"]]],
      ["Tokens per step", "Prompt tokens prefilled and output tokens decoded in each step: prefill spikes are " +
       "what lengthen the steps of the requests decoding beside them.", "tokens",
       [["prefill_tokens", "prefill"], ["decode_tokens", "decode", [6, 4]]]],
      ["Preemptions and tenant switches", "Running totals: sequences preempted (KV cache full) and switches of the " +
       "batch between tenants. A steep rise is a burst of them.", "count",
       [["preemptions_total", "preemptions"], ["tenant_switches_total", "tenant switches", [6, 4]]]],
      ["KV swapped to host", "Running totals of KV-cache bytes swapped out to and in from host memory.", "bytes",
       [["swap_out_bytes_total", "swapped out"], ["swap_in_bytes_total", "swapped in", [6, 4]]]],
    ];
    for (const [title, caption, unit, names] of charts) {
      const lines = [];
      for (const [r, i] of stepRuns)
        names.forEach(([n, what, dash], k) => lines.push(stepLine(r, i, n, what, k, dash)));
      const any = lines.some((l) => l.y && l.y.some((v) => isNum(v) && v !== 0));
      if (!any && unit === "bytes") continue;  // no swapping configured: nothing to show
      lineChart(box, title, caption, T, unit, lines,
                {time: true, yRange: unit === "fraction" ? [0, 1] : undefined});
    }
  }

  // ---- latency CDFs
  if (runs.length) {
    const cdfBox = el("div", {class: "charts"});
    section("Latency distributions", "Every run overlaid; computed on every request.", cdfBox);
    const cdfs = [
      ["ttft_ms", "TTFT", "time to first token from the send"],
      ["ttft_sched_ms", "TTFT from schedule", "time to first token from when the request was due (client lag counts)"],
      ["ttfo_ms", "TTFO", "time to the first answer token from the send (a reasoning model's reasoning comes first)"],
      ["tpot_ms", "TPOT", "time per output token after the first, per request"],
      ["tpot_answer_ms", "TPOT of the answer", "time per answer token after the first answer token, per request"],
      ["itl_ms", "ITL", "every gap between output tokens"],
      ["e2e_ms", "E2E", "request latency from the send to the last token"],
    ];
    for (const [key, name, what] of cdfs) {
      const withKey = runs.filter((r) => r.cdf[key]);  // TTFO: runs with reasoning only
      if (!withKey.length) continue;
      lineChart(cdfBox, name + " CDF", "Share of " + (key === "itl_ms" ? "token gaps" : "requests") +
                " (y) at or below a latency (x, log scale): " + what +
                ". Further left is faster; a long flat top is a tail.", name + " (ms)",
                key === "itl_ms" ? "fraction of token gaps" : "fraction of requests",
                withKey.map((r) => ({label: runLabel(r), x: r.cdf[key].x, y: r.cdf[key].y,
                                     color: palette[runs.indexOf(r) % palette.length]})),
                {logX: true, yRange: [0, 1]});
    }
  }

  // ---- hit rate x p99 latency -> throughput
  const heatRuns = runs.filter((r) => r.heatmap && (r.heatmap.ttft || r.heatmap.tpot));
  if (heatRuns.length) {
    const box = el("div", {class: "charts"});
    section("Prefix-cache hit rate, latency and throughput", "Each time window of the run lands in one cell by its " +
            "prefix-cache hit rate and its p99 latency; the cell's colour is the mean output tokens/s of the windows " +
            "in it. Where throughput is high at low latency is where the server is healthy; a bright cell at low hit " +
            "rate and high latency is cache misses costing throughput.", box);
    heatRuns.forEach((r) => {
      for (const [key, what] of [["ttft", "TTFT"], ["tpot", "TPOT"]]) {
        const h = r.heatmap[key];
        if (!h) continue;
        const ys = h.y_edges, lo = h.tps_min, hi = h.tps_max;
        const scale = (v) => (hi > lo ? (v - lo) / (hi - lo) : 0.5);
        drawnChart(box, (multi ? r.name + ": " : "") + "Hit rate × p99 " + what + " → output tokens/s",
                   h.windows + " windows of " + fmt(h.window_s, 2) + " s; colour: mean output tokens/s (" +
                   (r.heatmap.tokens_from === "server" ? "the server's generation counter" : "requests that ended") +
                   "), number in a cell: its windows.",
                   "prefix-cache hit rate (fraction)", "p99 " + what + " (ms, log)", [0, 1], [ys[0], ys[ys.length - 1]],
                   (u, ctx) => {
                     ctx.font = Math.round(10 * (window.devicePixelRatio || 1)) + "px system-ui, sans-serif";
                     ctx.textAlign = "center";
                     ctx.textBaseline = "middle";
                     for (const [xi, yi, count, mean] of h.cells) {
                       const x0 = u.valToPos(h.x_edges[xi], "x", true), x1 = u.valToPos(h.x_edges[xi + 1], "x", true);
                       const y0 = u.valToPos(ys[yi], "y", true), y1 = u.valToPos(ys[yi + 1], "y", true);
                       ctx.fillStyle = colourAt(scale(mean));
                       ctx.fillRect(Math.min(x0, x1), Math.min(y0, y1), Math.abs(x1 - x0), Math.abs(y1 - y0));
                       ctx.fillStyle = scale(mean) > 0.6 ? "#1d2330" : "#ffffff";
                       ctx.fillText(String(count), (x0 + x1) / 2, (y0 + y1) / 2);
                     }
                   },
                   {logY: true, ySplits: () => ys.filter((v, k) => k % 2 === 0), ySize: 60,
                    yValues: (u, splits) => splits.map((v) => si(v)),
                    after: colourBar(lo, hi, "output tokens/s (mean of the windows in a cell)")});
      }
    });
  }

  // ---- the slowest requests
  const slowRuns = runs.filter((r) => (r.slowest || []).length);
  if (slowRuns.length) {
    const box = el("div", {class: "charts wide"});
    const parts = [["slot", "#e2e8f0", "waiting for a slot (--max-concurrency)"],
                   ["client", "#94a3b8", "could be sent, not yet sent (client)"], ["queue", "#f59e0b", "waiting in the server"],
                   ["wait", "#a78bfa", "waiting and prefill (not told apart)"], ["prefill", "#2563eb", "prefill"],
                   ["decode", "#86efac", "decode"], ["token", "#15803d", "an output event"]];
    const legend = el("div", {class: "legend"}, ...parts.map(([k, c, t]) => {
      const sw = el("span", {class: "swatch"});
      sw.style.background = c;
      return el("span", {}, sw, t);
    }));
    section("The slowest requests", "Each row is one of the requests with the longest E2E, slowest at the top, on " +
            "a time axis from when it was due. Where the time went: the client, the server's queue, prefill, " +
            "decode; each tick is an output event.", legend, box);
    const colour = Object.fromEntries(parts.map(([k, c]) => [k, c]));
    slowRuns.forEach((r) => {
      const rows = r.slowest;
      const end = Math.max(...rows.map((x) => Math.max(x.close_ms || 0, x.last_token_ms || 0)));
      const split = rows.some((x) => x.prefill_split !== "none");
      drawnChart(box, (multi ? r.name + ": " : "") + "Waterfall of the " + rows.length + " slowest requests",
                 "Milliseconds from each request's scheduled time. " +
                 (split ? "The server's queue ends where the engine first ran the request (sim) or where its own " +
                          "prefill time says (llama.cpp's timings)."
                        : "This server does not say when its prefill began, so waiting and prefill are one segment."),
                 "ms from the request's scheduled time", "request (slowest first)", [0, end * 1.02],
                 [-0.6, rows.length - 0.4],
                 (u, ctx) => {
                   const dpr = window.devicePixelRatio || 1;
                   const rowH = Math.abs(u.valToPos(0, "y", true) - u.valToPos(1, "y", true));
                   const bar = Math.max(2, rowH * 0.7);
                   const seg = (y, a, b, c) => {
                     if (!isNum(a) || !isNum(b) || b <= a) return;
                     const x0 = u.valToPos(a, "x", true), x1 = u.valToPos(b, "x", true);
                     ctx.fillStyle = colour[c];
                     ctx.fillRect(x0, y - bar / 2, Math.max(1, x1 - x0), bar);
                   };
                   rows.forEach((x, i) => {
                     const y = u.valToPos(i, "y", true);
                     const ready = isNum(x.dispatch_ms) ? x.dispatch_ms : x.sched_ms;
                     seg(y, x.sched_ms, ready, "slot");
                     seg(y, ready, x.send_ms, "client");
                     if (x.prefill_split !== "none") {
                       seg(y, x.send_ms, x.prefill_start_ms, "queue");
                       seg(y, x.prefill_start_ms, x.first_token_ms, "prefill");
                     } else {
                       seg(y, x.send_ms, x.first_token_ms, "wait");
                     }
                     seg(y, x.first_token_ms, x.last_token_ms, "decode");
                     ctx.fillStyle = colour.token;
                     // Ticks at least 3 px apart: dense decoding reads as
                     // evenly spaced ticks, a stall as a stretch without.
                     let last = -Infinity;
                     for (const t of x.events_ms) {
                       const px = Math.round(u.valToPos(t, "x", true));
                       if (px - last < 3 * dpr) continue;
                       last = px;
                       ctx.fillRect(px, y - bar / 2, Math.max(1, dpr), bar);
                     }
                   });
                 },
                 {yDir: -1, height: Math.max(220, 26 * rows.length + 70), ySize: 70,
                  ySplits: () => rows.map((x, i) => i),
                  yValues: (u, splits) => splits.map((v) => (rows[v] ? "#" + rows[v].id : "")),
                  after: table(["request", "tenant", "class", "E2E (ms)", "queue+prefill (ms)", "prompt", "cached",
                                "output", "preempted"],
                               rows.map((x) => ["#" + x.id, x.tenant || "-", x.class || "-", fmt(x.e2e_ms, 1),
                                                fmt(x.first_token_ms - x.send_ms, 1),
                                                x.prompt_tokens >= 0 ? fmt(x.prompt_tokens, 0) : "-",
                                                x.cached_tokens >= 0 ? fmt(x.cached_tokens, 0) : "-",
                                                x.output_tokens >= 0 ? fmt(x.output_tokens, 0) : "-",
                                                fmt(x.preemptions, 0)]), "small")});
    });
  }

  // ---- sweeps
  for (const sw of data.sweeps || []) {
    // Repeats (bench/sim --repeat): each headline metric over the runs, with
    // the between-run interval of its mean.
    if (sw.kind === "repeats") {
      const st = sw.statistics || {};
      const rows = Object.keys(st).map((k) => [k, fmt(st[k].mean, sig(st[k].mean)),
        Array.isArray(st[k].ci) ? "[" + fmt(st[k].ci[0], sig(st[k].ci[0])) + ", " + fmt(st[k].ci[1], sig(st[k].ci[1])) + "]" : "-",
        (st[k].values || []).map((v) => fmt(v, sig(v))).join(", ")]);
      section("Repeats " + sw.name, "The same settings run " + (sw.runs || []).length + " times with fresh seeds: " +
              "each headline metric's mean over the runs with its 95% interval (Student's t), and each run's value.",
              table(["metric", "mean", "95% interval", "runs"], rows));
      continue;
    }
    // A server sweep (bench --server-sweep): one run per server setting,
    // latency against the throughput each setting reached.
    if (sw.kind === "server") {
      const pts = (sw.curve || []).map((p) => Object.assign({
        label: Object.entries(p.settings || {}).map(([k, v]) => k + "=" + v).join(" ")}, p));
      const box = el("div", {class: "charts"});
      section("Server sweep " + sw.name, "One run per server setting, the server started for each run and " +
              "stopped after it" + (sw.repeats > 1 ? " (each point: the mean of " + sw.repeats + " repeats)" : "") +
              (sw.partial ? "; interrupted: the settings not reached are missing" : "") + ".", box);
      const byX = pts.filter((p) => isNum(p.output_tps)).sort((a, b) => a.output_tps - b.output_tps);
      const x = byX.map((p) => p.output_tps);
      lineChart(box, "Latency against throughput", "Each point is one server setting (" +
                byX.map((p) => p.label).join(", ") + "), placed at the output tokens per second it reached.",
                "output tokens/s", "ms",
                [{label: "TTFT p50", x: x, y: byX.map((p) => p.ttft_p50_ms)},
                 {label: "TTFT p99", x: x, y: byX.map((p) => p.ttft_p99_ms)},
                 {label: "TPOT p50", x: x, y: byX.map((p) => p.tpot_p50_ms)},
                 {label: "TPOT p99", x: x, y: byX.map((p) => p.tpot_p99_ms)}]);
      box.append(table(["server setting", "req/s", "output tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
                        "failed", "SLO"],
                       pts.map((p) => [p.label, fmt(p.achieved_rps, 3), fmt(p.output_tps, 1), fmt(p.ttft_p50_ms, 1),
                                       fmt(p.ttft_p99_ms, 1), fmt(p.tpot_p50_ms, 2), fmt(p.tpot_p99_ms, 2),
                                       isNum(p.failed) ? fmt(p.failed, 0) : "-",
                                       p.slo_pass === true ? "pass" : p.slo_pass === false ? "FAIL" : "-"]), "small"));
      continue;
    }
    const box = el("div", {class: "charts"});
    section("Sweep " + sw.name, "One run per offered rate.", box);
    const c = sw.curve || [];
    const x = c.map((p) => p.rate_rps);
    // Achieved: each run's steady-state throughput (ramp-up and drain left
    // out) where the run is in the report, else the sweep's own figure.
    const steady = c.map((p, k) => {
      const r = runs[(sw.runs || [])[k]];
      const v = r && r.summary ? r.summary.request_throughput_steady_rps : null;
      return isNum(v) ? v : p.achieved_rps;
    });
    lineChart(box, "Throughput vs offered rate", "Achieved (steady state: ramp-up and drain left out) and goodput " +
              "(requests meeting every SLO) per offered rate. Where they leave the diagonal, the server saturates.",
              "offered rate (req/s)", "requests/s",
              [{label: "offered", x: x, y: x, dash: [6, 4], color: "#888"},
               {label: "achieved", x: x, y: steady},
               {label: "goodput", x: x, y: c.map((p) => p.goodput_rps)}]);
    lineChart(box, "Latency vs offered rate", "p99 TTFT and TPOT of each run of the sweep.", "offered rate (req/s)", "ms",
              [{label: "TTFT p99", x: x, y: c.map((p) => p.ttft_p99_ms)},
               {label: "TPOT p99", x: x, y: c.map((p) => p.tpot_p99_ms)}]);
    if (isNum(sw.max_rate_meeting_slo))
      box.append(el("p", {}, "Highest rate meeting every SLO: " + fmt(sw.max_rate_meeting_slo, 3) + " req/s."));
  }

  // ---- details: outcomes, per class and tenant, server counters, settings
  if (runs.length) {
    const details = el("div", {});
    const orows = [];
    for (const r of runs)
      for (const [k, v] of Object.entries(sum(r).requests_by_outcome || {})) orows.push([r.name, k, fmt(v, 0)]);
    if (orows.length) details.append(el("h3", {}, "Outcomes"), table(["run", "outcome", "requests"], orows));
    for (const [key, label] of [["by_class", "task class"], ["by_tenant", "tenant"]]) {
      const rows = [];
      for (const r of runs)
        for (const [name, g] of Object.entries(sum(r)[key] || {}))
          rows.push([r.name, name || "(none)", fmt(g.requests, 0), fmt(g.failed, 0), fmt(g.request_throughput_rps, 2),
                     fmt(g.goodput_rps, 2), fmt(g.ttft_ms && g.ttft_ms.p99, 1), fmt(g.tpot_ms && g.tpot_ms.p99, 2),
                     fmt(g.e2e_ms && g.e2e_ms.p99, 1)]);
      if (rows.length)
        details.append(el("h3", {}, "Per " + label),
                       table(["run", label, "requests", "failed", "req/s", "goodput", "TTFT p99 (ms)", "TPOT p99 (ms)",
                              "E2E p99 (ms)"], rows));
    }
    const srows = [];
    let serverDefinition = null;
    for (const r of runs) {
      const s = r.server;
      if (!s || typeof s !== "object") continue;
      for (const [k, v] of Object.entries(s)) {
        if (k === "definition") {
          serverDefinition = String(v);
          continue;
        }
        if (k === "hidden_queue" && v && typeof v === "object") {
          srows.push([r.name, "hidden queue (requests in flight the gauges do not show)",
                      "mean " + fmt(v.mean, 2) + ", max " + fmt(v.max, 0) + " of " + fmt(v.in_flight_max, 0) +
                      " in flight at most (" + fmt(v.samples, 0) + " samples)"]);
          continue;
        }
        if (v !== null && typeof v === "object") {
          if ("p50" in v) srows.push([r.name, k, "mean " + fmt(v.mean, 4) + ", p50 " + fmt(v.p50, 4) + ", p99 " +
                                                 fmt(v.p99, 4) + " (" + fmt(v.count, 0) + ")"]);
          continue;
        }
        srows.push([r.name, k, typeof v === "number" ? fmt(v, Number.isInteger(v) ? 0 : 3) : String(v)]);
      }
    }
    if (srows.length)
      details.append(el("h3", {}, "Server's own counters over the run"),
                     serverDefinition ? el("p", {class: "sub"}, serverDefinition) : null,
                     table(["run", "counter", "value"], srows, "kvtable"));
    runs.forEach((run) => {
      const entries = Object.entries(run.settings || {});
      if (!entries.length) return;
      const grid = el("dl", {class: "settings"});
      for (const [k, v] of entries)
        // Numbers rounded to 6 significant digits (a rate of 0.30000000000000004 reads 0.3).
        grid.append(el("dt", {}, k.replace(/_/g, " ")),
                    el("dd", {}, typeof v === "object" ? JSON.stringify(v, (_, x) => roundSetting(x))
                                                       : String(roundSetting(v))));
      details.append(el("h3", {}, "Settings and environment" + (multi ? ": " + run.name : "")), grid);
    });
    section("Details", null, details);
  }

  // ---- probes (probe ... --out DIR)
  if (probes.length) {
    const box = el("div", {});
    section("Probes", "Results of tokenscope probe: medians with their exact 95% intervals (distribution-free), " +
            "ratios taken per repetition.", box);
    for (const p of probes) {
      const part = el("div", {class: "probe"});
      box.append(el("h3", {}, "probe " + p.probe), el("p", {class: "sub"}, p.file +
                 (p.environment && p.environment.cpu ? " · " + p.environment.cpu : "") +
                 (p.environment && p.environment.hostname ? " · " + p.environment.hostname : "")), part);
      if (p.verdict) part.append(el("div", {class: "box note"}, "Verdict: " + p.verdict));
      if (p.ran === false && p.reason) part.append(el("div", {class: "box warn"}, "Did not run: " + p.reason));
      if (p.probe === "cache-line") {
        const fs = p.false_sharing || {};
        if (fs.verdict) part.append(el("div", {class: "box note"}, "False sharing: " + fs.verdict));
        part.append(table(["ratio", "median [95% CI]"], (fs.ratios || []).map((r) => [r.name, ci(r.ratio, (v) => v.toFixed(2))])));
        const ls = p.line_size || {};
        part.append(table(["line size", "bytes"], [["detected", fmt(ls.detected, 0)],
                                                    ["coherence granularity", fmt(ls.coherence_granularity, 0)],
                                                    ["stride-sweep knee", fmt(ls.stride_knee, 0)],
                                                    ["sysfs", fmt(ls.sysfs, 0)]]));
        const sweep = p.coherence_sweep || [];
        if (sweep.length) {
          const cbox = el("div", {class: "charts"});
          part.append(cbox);
          const xs = sweep.map((s) => s.distance_bytes);
          const med = sweep.map((s) => s.slowdown_vs_far && s.slowdown_vs_far.median);
          lineChart(cbox, "Coherence sweep", "Slowdown of two threads' counters placed a distance apart, against " +
                    "counters far apart (median solid, 95% interval dashed). It falls to 1 at the distance the " +
                    "hardware keeps lines apart: the padding that ends false sharing.", "distance between counters (bytes, log)",
                    "slowdown (x)",
                    [{label: "median", x: xs, y: med},
                     {label: "95% low", x: xs, y: sweep.map((s) => s.slowdown_vs_far && s.slowdown_vs_far.ci95_low), dash: [6, 4], color: "#93c5fd"},
                     {label: "95% high", x: xs, y: sweep.map((s) => s.slowdown_vs_far && s.slowdown_vs_far.ci95_high), dash: [6, 4], color: "#93c5fd"}],
                    {logX: true});
        }
        if ((p.core_to_core || []).length)
          part.append(table(["cpu", "cpu", "SMT siblings", "one-way latency (ns)"],
                            p.core_to_core.map((c) => [c.cpu_a, c.cpu_b, c.siblings ? "yes" : "no",
                                                       ci(c.one_way_ns, (v) => v.toFixed(1))])));
      } else if (p.probe === "kv-layout") {
        if (p.winner && !p.verdict) part.append(el("p", {}, "Fastest: " + p.winner));
        part.append(table(["variant", "positions/s", "time vs fastest", "rows straddling lines", "rows sharing lines",
                           "metadata lines shared"],
                          (p.variants || []).map((v) => {
                            const a = v.analysis || {};
                            return [v.name, ci(v.positions_per_s), ci(v.time_vs_fastest, (x) => x.toFixed(2)),
                                    pct(a.straddle_share), pct(a.shared_row_share),
                                    fmt(a.metadata_lines_shared_between_threads, 0) + " of " + fmt(a.metadata_lines, 0)];
                          })));
        if ((p.findings || []).length) part.append(el("ul", {}, ...p.findings.map((f) => el("li", {}, f))));
      } else if (p.probe === "line-sim") {
        const sim = p.simulation || {}, t = sim.totals || {};
        part.append(table(["accesses", "lines", "falsely shared lines", "truly shared lines", "HITM", "invalidations",
                           "false-sharing misses", "true-sharing misses"],
                          [[si(t.accesses), si(t.lines), si(t.lines_with_false_sharing), si(t.lines_with_true_sharing),
                            si(t.hitm), si(t.invalidations), si(t.false_sharing_misses), si(t.true_sharing_misses)]]));
        part.append(el("h4", {}, "Lines (" + (sim.line_size || "?") + " B), most contended first"),
                    table(["line", "sharing", "HITM", "invalidations", "false-sharing misses", "threads", "what is on it"],
                          (sim.lines || []).slice(0, 20).map((l) => [l.line_address,
                                                                     ({"false": "false sharing", "true": "true sharing"})[l.classification] || l.classification,
                                                                     si(l.hitm),
                                                                     si(l.invalidations), si(l.false_sharing_misses),
                                                                     (l.threads || []).join(", "),
                                                                     (l.symbols || []).join("; ")]), "small textlast"));
        if ((p.predictions || []).length)
          part.append(el("h4", {}, "What another line size or padding would change"),
                      table(["scenario", "HITM", "invalidations", "false-sharing misses", "true-sharing misses"],
                            p.predictions.map((x) => [x.scenario, si(x.totals.hitm), si(x.totals.invalidations),
                                                      si(x.totals.false_sharing_misses),
                                                      si(x.totals.true_sharing_misses)])));
      } else {
        // Other probes: every array of records at the top level (or one
        // level down) as a table of its scalar and median fields.
        const tables = [];
        const visit = (obj, prefix) => {
          for (const [k, v] of Object.entries(obj || {})) {
            if (Array.isArray(v) && v.length && typeof v[0] === "object" && v[0] !== null) tables.push([prefix + k, v]);
            else if (v && typeof v === "object" && !Array.isArray(v) && !prefix && k !== "settings" &&
                     k !== "environment") visit(v, k + ".");
          }
        };
        visit(p, "");
        for (const [name, rows] of tables) {
          const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((c) => rows.some((r) => {
            const v = r[c];
            return v === null || typeof v !== "object" || isNum(v.median);
          }));
          part.append(el("h4", {}, name),
                      table(cols.map((c) => c.replace(/_/g, " ")),
                            rows.map((r) => cols.map((c) => {
                              const v = r[c];
                              if (v && typeof v === "object") return ci(v);
                              return isNum(v) ? si(v) : v === null || v === undefined ? "-" : String(v);
                            })), "small"));
        }
        if ((p.findings || []).length) part.append(el("ul", {}, ...p.findings.map((f) => el("li", {}, f))));
      }
    }
  }

  root.append(el("p", {class: "sub"}, "Statistics are computed on every request; charts are reduced to at most four " +
                 "points per pixel column (first, min, max, last), so spikes stay visible."));
  if (window.performance && performance.mark) performance.mark("tokenscope-report-built");
  document.body.setAttribute("data-charts", String(allCharts.length));
})();
