// Loads a `tokenscope report` page in a real browser (Debian's chromium,
// driven by puppeteer-core) and checks what a reader would see:
//   - the page loads with no console error, no uncaught exception, no failed
//     request and no request leaving the file (it must open offline);
//   - every chart has a title, a caption and labelled axes (uPlot draws the
//     labels on the canvas from its axes' settings, which are checked), and
//     its plot area holds drawn data (coloured pixels, not only axes and grid);
//   - dragging across one time chart zooms every time chart to the same
//     range, and a double-click resets them all;
//   - the agentic tasks' section, where there is one: tables with rows, the
//     task waterfall drawn, a step's tooltip on hover;
//   - with --timing: how long the page took to load and draw;
//   - with --screenshot PNG: a picture of the page.
//
//   node report_browser.mjs REPORT.html [--screenshot OUT.png] [--full-page]
//        [--timing] [--width PX] [--height PX]
//
// Prints one JSON object with what it found; exits 1 when a check fails (the
// reasons are in "failures"), 2 when the browser cannot be started.
// TOKENSCOPE_CHROMIUM names the browser (default /usr/bin/chromium).
import path from "node:path";
import process from "node:process";
import puppeteer from "puppeteer-core";

function usage(message) {
  process.stderr.write(`report_browser.mjs: ${message}\n` +
                       "usage: node report_browser.mjs REPORT.html [--screenshot OUT.png] [--full-page] [--timing] " +
                       "[--width PX] [--height PX]\n");
  process.exit(2);
}

const args = process.argv.slice(2);
let file = null, screenshot = null, fullPage = false, timing = false, width = 1320, height = 1000;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === "--screenshot") screenshot = args[++i];
  else if (a === "--full-page") fullPage = true;
  else if (a === "--timing") timing = true;
  else if (a === "--width") width = Number(args[++i]);
  else if (a === "--height") height = Number(args[++i]);
  else if (a.startsWith("--")) usage(`unknown option ${a}`);
  else if (file === null) file = a;
  else usage(`one report at a time (got ${file} and ${a})`);
}
if (file === null) usage("name a report.html");
if (!(width > 0) || !(height > 0)) usage("--width and --height take pixels");

const failures = [];
const result = {file: path.resolve(file), failures: failures};
const executablePath = process.env.TOKENSCOPE_CHROMIUM || "/usr/bin/chromium";

let browser;
try {
  browser = await puppeteer.launch({
    executablePath: executablePath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--disable-background-networking", "--disable-component-update"],
    defaultViewport: {width: width, height: height},
  });
} catch (e) {
  process.stderr.write(`report_browser.mjs: cannot start ${executablePath}: ${e.message}\n`);
  process.exit(2);
}

const consoleErrors = [], pageErrors = [], failedRequests = [], outside = [];
try {
  const page = await browser.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "assert") consoleErrors.push(m.text());
  });
  // An exception thrown by the page's script ends the wait for its charts at once.
  let thrownBy = null;
  const thrown = new Promise((resolve, reject) => { thrownBy = reject; });
  thrown.catch(() => {});
  page.on("pageerror", (e) => {
    pageErrors.push(String(e && e.message ? e.message : e));
    thrownBy(new Error("the page's script threw before it drew its charts"));
  });
  page.on("requestfailed", (r) => failedRequests.push(`${r.url()}: ${r.failure() ? r.failure().errorText : "?"}`));
  page.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith("file:") && !u.startsWith("data:") && !u.startsWith("blob:")) outside.push(u);
  });

  const url = "file://" + path.resolve(file);
  const started = Date.now();
  await page.goto(url, {waitUntil: "load", timeout: 60000});
  // report.js sets data-charts on <body> when it has built every chart; two
  // animation frames later uPlot has drawn them.
  await Promise.race([page.waitForSelector("body[data-charts]", {timeout: 60000}), thrown]);
  const drawnMs = await page.evaluate(() => new Promise((resolve) =>
      requestAnimationFrame(() => requestAnimationFrame(() => resolve(performance.now())))));
  const wallMs = Date.now() - started;
  if (timing) {
    const nav = await page.evaluate(() => {
      const n = performance.getEntriesByType("navigation")[0];
      const built = performance.getEntriesByName("tokenscope-report-built")[0];
      return {dom_content_loaded_ms: n ? n.domContentLoadedEventEnd : null, load_ms: n ? n.loadEventEnd : null,
              built_ms: built ? built.startTime : null, transfer_bytes: n ? n.decodedBodySize : null};
    });
    result.timing = Object.assign(nav, {drawn_ms: drawnMs, wall_ms: wallMs});
  }

  // Every chart: title, caption, axis labels, drawn pixels in its plot area.
  const charts = await page.evaluate(() => {
    const out = [];
    const list = window.tokenscopeCharts || [];
    for (const c of list) {
      const u = c.u;
      const box = u.root.closest(".chart");
      const title = box ? (box.querySelector(".title") || {}).textContent || "" : "";
      const caption = box ? (box.querySelector(".caption") || {}).textContent || "" : "";
      const axisLabels = u.axes.map((a) => (typeof a.label === "string" ? a.label : ""));
      // Pixels of the plot area whose colour is saturated (the series and
      // the heat map's cells; axes, ticks and grid lines are grey).
      const b = u.bbox;
      let coloured = 0, total = 0;
      if (b.width > 0 && b.height > 0) {
        const img = u.ctx.getImageData(Math.round(b.left), Math.round(b.top), Math.round(b.width),
                                       Math.round(b.height)).data;
        for (let i = 0; i < img.length; i += 4) {
          total++;
          if (img[i + 3] < 32) continue;
          const mx = Math.max(img[i], img[i + 1], img[i + 2]), mn = Math.min(img[i], img[i + 1], img[i + 2]);
          if (mx - mn > 40) coloured++;
        }
      }
      // Lines a reader could not tell apart (same colour and dash), and lines
      // with a single value drawn without a point (invisible).
      const looks = new Map();
      const clashes = [], invisible = [];
      u.series.forEach((s, i) => {
        if (i === 0 || !s.show) return;
        const key = String(s._stroke || s.stroke) + "|" + JSON.stringify(s.dash || null);
        if (looks.has(key) && typeof s.label === "string") clashes.push(looks.get(key) + " / " + s.label);
        looks.set(key, s.label);
        const finite = (u.data[i] || []).filter((v) => typeof v === "number" && isFinite(v)).length;
        const show = s.points ? (typeof s.points.show === "function" ? s.points.show(u, i) : s.points.show) : false;
        if (finite === 1 && !show) invisible.push(s.label);
      });
      out.push({title: title, caption: caption, time: !!c.time, axis_labels: axisLabels, series: u.series.length - 1,
                coloured_pixels: coloured, plot_pixels: total, width: u.width, height: u.height,
                clashes: clashes, invisible: invisible});
    }
    const boxes = document.querySelectorAll(".chart").length;
    const empty = document.querySelectorAll(".chart .empty").length;
    const data = JSON.parse(document.getElementById("report-data").textContent);
    // Text a reader should never see: numbers that failed to format.
    const text = document.getElementById("report").innerText;
    const bad = (text.match(/\b(NaN|undefined|Infinity|\[object Object\])\b/g) || []).slice(0, 5);
    // Headings that span a grid of charts (what a group of charts shows).
    const headings = [...document.querySelectorAll(".charts > .span")].map((e) => e.textContent);
    return {charts: out, boxes: boxes, empty: empty, data_charts: document.body.getAttribute("data-charts"),
            headings: headings, sections: [...document.querySelectorAll("section > h2")].map((e) => e.textContent),
            runs: (data.runs || []).length, bad_text: bad,
            page_width: document.documentElement.scrollWidth, view_width: window.innerWidth};
  });
  result.charts = charts.charts.length;
  result.time_charts = charts.charts.filter((c) => c.time).length;
  result.chart_boxes = charts.boxes;
  result.empty_charts = charts.empty;
  result.titles = charts.charts.map((c) => c.title);
  result.series = charts.charts.map((c) => c.series);  // each chart's series, the x values not counted
  result.headings = charts.headings;
  result.sections = charts.sections;
  if (charts.charts.length === 0 && charts.runs > 0) failures.push("no chart on the page");
  for (const b of charts.bad_text) failures.push(`the page shows "${b}"`);
  if (charts.page_width > charts.view_width + 1)
    failures.push(`the page is ${charts.page_width} px wide in a ${charts.view_width} px window`);
  if (charts.boxes !== charts.charts.length + charts.empty)
    failures.push(`${charts.boxes} chart boxes but ${charts.charts.length} charts and ${charts.empty} marked empty`);
  for (const c of charts.charts) {
    const name = c.title || "(untitled chart)";
    if (!c.title) failures.push("a chart without a title");
    if (!c.caption) failures.push(`${name}: no caption`);
    if (c.axis_labels.length < 2 || c.axis_labels.some((l) => !l)) failures.push(`${name}: an axis without a label`);
    if (c.coloured_pixels < 20) failures.push(`${name}: nothing drawn in the plot area (${c.coloured_pixels} coloured pixels)`);
    for (const x of c.clashes) failures.push(`${name}: lines drawn alike: ${x}`);
    for (const x of c.invisible) failures.push(`${name}: ${x} has one value and no point: not drawn`);
  }
  result.least_coloured = charts.charts.reduce((m, c) => Math.min(m, c.coloured_pixels), Infinity);

  // Zoom: drag across the first time chart with the mouse, as a reader would.
  if (result.time_charts >= 2) {
    const scales = () => page.evaluate(() => (window.tokenscopeCharts || []).filter((c) => c.time)
                                                   .map((c) => [c.u.scales.x.min, c.u.scales.x.max]));
    const before = await scales();
    const over = await page.evaluateHandle(() => window.tokenscopeCharts.find((c) => c.time).u.over);
    await over.evaluate((e) => e.scrollIntoView({block: "center"}));
    const r = await over.boundingBox();
    const y = r.y + r.height / 2;
    await page.mouse.move(r.x + r.width * 0.3, y);
    await page.mouse.down();
    await page.mouse.move(r.x + r.width * 0.45, y, {steps: 5});
    await page.mouse.move(r.x + r.width * 0.6, y, {steps: 5});
    await page.mouse.up();
    const zoomed = await scales();
    const [zmin, zmax] = zoomed[0];
    const [bmin, bmax] = before[0];
    const tol = (bmax - bmin) * 1e-6;
    const narrowed = zmax - zmin < (bmax - bmin) * 0.8 && zmin > bmin - tol && zmax < bmax + tol;
    const followed = zoomed.filter((s) => Math.abs(s[0] - zmin) <= tol && Math.abs(s[1] - zmax) <= tol).length;
    await page.mouse.click(r.x + r.width * 0.5, y, {clickCount: 2});
    // uPlot resets on the second click of a double click.
    await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => resolve())));
    const reset = await scales();
    const resetAll = reset.every((s) => Math.abs(s[0] - reset[0][0]) <= (bmax - bmin) * 1e-6 &&
                                        Math.abs(s[1] - reset[0][1]) <= (bmax - bmin) * 1e-6) &&
                     reset[0][1] - reset[0][0] > (zmax - zmin) * 1.2;
    result.zoom = {before: before[0], zoomed: [zmin, zmax], charts_following: followed, of: zoomed.length,
                   reset: reset[0]};
    if (!narrowed) failures.push(`dragging across the first time chart did not zoom it (${bmin}..${bmax} -> ${zmin}..${zmax})`);
    if (followed !== zoomed.length)
      failures.push(`zooming one time chart moved ${followed - 1} of the ${zoomed.length - 1} others`);
    if (!resetAll) failures.push("a double-click did not reset every time chart");
    await page.evaluate(() => window.scrollTo(0, 0));
  }

  // The agentic tasks' section (section#tasks, for runs with tasks): its
  // tables have rows, its waterfall is drawn, and hovering a step of it
  // shows the step's tooltip (report.js gives where to hover).
  const tasks = await page.evaluate(() => {
    const s = document.getElementById("tasks");
    if (!s) return null;
    return {tables: s.querySelectorAll("table").length, rows: s.querySelectorAll("tbody tr").length,
            charts: s.querySelectorAll(".chart").length, canvases: s.querySelectorAll(".chart canvas").length};
  });
  if (tasks) {
    result.tasks = tasks;
    if (!tasks.tables || !tasks.rows) failures.push(`tasks section: ${tasks.tables} tables, ${tasks.rows} rows`);
    if (!tasks.canvases) failures.push("tasks section: no waterfall drawn");
    const frames = () => page.evaluate(() => new Promise((resolve) =>
        requestAnimationFrame(() => requestAnimationFrame(() => resolve()))));
    const at = await page.evaluate(() => {
      const c = (window.tokenscopeCharts || []).find((x) => typeof x.hover === "function");
      if (!c) return null;
      // The point in the middle of the window (a waterfall can be taller than it).
      const h = c.hover();
      window.scrollBy(0, c.u.over.getBoundingClientRect().y + h.y - window.innerHeight / 2);
      const r = c.u.over.getBoundingClientRect();
      return {x: r.x + h.x, y: r.y + h.y};
    });
    if (at) {
      await frames();  // uPlot takes the plot's place again after the scroll
      await page.mouse.move(at.x, at.y);
      await frames();
      tasks.tooltip = await page.evaluate(() => {
        const t = [...document.querySelectorAll("#tasks .tip")].find((e) => e.style.display !== "none");
        return t ? t.textContent : null;
      });
      if (!tasks.tooltip || !/\bstep /.test(tasks.tooltip))
        failures.push(`tasks section: hovering a step shows ${JSON.stringify(tasks.tooltip)}`);
    } else {
      failures.push("tasks section: the waterfall has no step to hover");
    }
    await page.evaluate(() => window.scrollTo(0, 0));
  }

  if (screenshot) {
    await page.mouse.move(1, 1);  // no cursor left on a chart
    await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => resolve())));
    await page.screenshot({path: screenshot, fullPage: fullPage});
    result.screenshot = path.resolve(screenshot);
  }
} catch (e) {
  failures.push(`browser: ${e && e.message ? e.message : e}`);
} finally {
  // Said whether the checks ran to the end or not: an exception thrown by
  // the page's script is why data-charts never came.
  result.console_errors = consoleErrors;
  result.page_errors = pageErrors;
  result.failed_requests = failedRequests;
  result.outside_requests = outside;
  for (const e of consoleErrors) failures.push(`console error: ${e}`);
  for (const e of pageErrors) failures.push(`uncaught exception: ${e}`);
  for (const e of failedRequests) failures.push(`failed request: ${e}`);
  for (const e of outside) failures.push(`request outside the file: ${e}`);
  await browser.close();
}
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(failures.length ? 1 : 0);
