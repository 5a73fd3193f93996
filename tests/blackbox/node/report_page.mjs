// Runs the script of a `tokenscope report` page under Node without a
// browser: a minimal DOM, uPlot's own join() (the real library is loaded)
// and a recording stand-in for the uPlot constructor that checks what each
// chart is given: data arrays of one length with ascending x, labelled axes,
// one series per data array, a caption. Then zooms the first time chart and
// checks that every other time chart followed. Prints a JSON summary; exits
// 1 naming the first problem. (The drawing itself needs a real browser: the
// puppeteer test of issue 13.)
//   node report_page.mjs report.html
import fs from "node:fs";
import vm from "node:vm";

const html = fs.readFileSync(process.argv[2], "utf8");
const problems = [];
const fail = (m) => problems.push(m);

const scripts = [...html.matchAll(/<script([^>]*)>([\s\S]*?)<\/script>/g)].map((m) => ({attrs: m[1], text: m[2]}));
const dataScript = scripts.find((s) => s.attrs.includes('id="report-data"'));
const code = scripts.filter((s) => !s.attrs.includes("application/json"));
if (!dataScript) fail("no report-data script element");
if (code.length !== 2) fail(`expected 2 scripts (uPlot, the page), found ${code.length}`);
if (/<(script|link|img)[^>]+(src|href)=/i.test(html)) fail("the page loads something from elsewhere");

class Node_ {
  constructor() { this.children = []; this.attrs = {}; this.className = ""; this._text = ""; }
  append(...cs) { for (const c of cs) this.children.push(c); }
  appendChild(c) { this.children.push(c); return c; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return this.attrs[k]; }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  set textContent(t) { this._text = t; this.children = []; }
  get clientWidth() { return 620; }
}
class Text_ extends Node_ { constructor(t) { super(); this._text = t; } }
class Element_ extends Node_ { constructor(tag) { super(); this.tagName = tag.toUpperCase(); this.style = {}; } }
const byId = new Map();
const root = new Element_("div");
byId.set("report", root);
const dataEl = new Element_("script");
dataEl.textContent = dataScript ? dataScript.text : "{}";
byId.set("report-data", dataEl);
const body = new Element_("body");
const document = {
  getElementById: (id) => byId.get(id) || null,
  createElement: (tag) => new Element_(tag),
  createTextNode: (t) => new Text_(t),
  body,
  documentElement: new Element_("html"),
  head: new Element_("head"),
  addEventListener() {},
  removeEventListener() {},
  dispatchEvent() { return true; },
};
const windowShim = {
  devicePixelRatio: 1,
  matchMedia: () => ({matches: false, addListener() {}, removeListener() {}, addEventListener() {}, removeEventListener() {}}),
  addEventListener() {},
  removeEventListener() {},
  requestAnimationFrame: (f) => setTimeout(f, 0),
  dispatchEvent() { return true; },
};
const context = vm.createContext({document, window: windowShim, Node: Node_, console, setTimeout, queueMicrotask,
                                  navigator: {userAgent: "node"}, CustomEvent: class CustomEvent {},
                                  ResizeObserver: class ResizeObserver { observe() {} },
                                  ...windowShim});
context.window = context;
context.document = document;

// The real uPlot, for its join(); the constructor is replaced below.
let real = null;
try {
  vm.runInContext(code[0].text + "\n;globalThis.__uPlot = uPlot;", context);
  real = context.__uPlot;
} catch (e) {
  fail("uPlot did not load: " + e.message);
}
const charts = [];
function FakeUPlot(opts, data, target) {
  const where = (target && target.children[0] && target.children[0].textContent) || "(untitled)";
  const caption = target && target.children[1] && target.children[1].textContent;
  if (!caption || caption.length < 20) fail(`${where}: no caption`);
  if (!Array.isArray(data) || data.length < 2) fail(`${where}: data is not [x, y...]`);
  else {
    const n = data[0].length;
    data.forEach((a, i) => { if (a.length !== n) fail(`${where}: series ${i} has ${a.length} values for ${n} x`); });
    for (let i = 1; i < n; i++) if (!(data[0][i] >= data[0][i - 1])) { fail(`${where}: x not ascending at ${i}`); break; }
    if (opts.series.length !== data.length) fail(`${where}: ${opts.series.length} series for ${data.length} arrays`);
    let values = 0;
    for (let s = 1; s < data.length; s++) values += data[s].filter((v) => typeof v === "number").length;
    if (values === 0) fail(`${where}: no value to draw`);
  }
  for (const [i, a] of (opts.axes || []).entries()) if (!a.label) fail(`${where}: axis ${i} has no label`);
  if (!opts.axes || opts.axes.length < 2) fail(`${where}: axes not labelled`);
  this.opts = opts;
  this.title = where;
  this.scales = {x: {min: data[0][0], max: data[0][data[0].length - 1]}};
  this.setScaleCalls = [];
  this.setScale = (key, r) => {
    this.setScaleCalls.push([key, r]);
    this.scales[key] = r;
    for (const h of (opts.hooks && opts.hooks.setScale) || []) h(this, key);
  };
  charts.push(this);
}
if (real) {
  FakeUPlot.join = real.join;
  FakeUPlot.paths = real.paths;
  FakeUPlot.sync = real.sync;
}
context.uPlot = FakeUPlot;
try {
  if (code[1]) vm.runInContext(code[1].text, context);
} catch (e) {
  fail("the page's script threw: " + (e.stack || e.message));
}

// Zoom one time chart: every other follows.
const timeCharts = charts.filter((c) => c.opts.hooks && c.opts.hooks.setScale);
if (timeCharts.length > 1) {
  timeCharts[0].setScale("x", {min: 0.5, max: 1.5});
  for (const c of timeCharts.slice(1)) {
    const last = c.setScaleCalls[c.setScaleCalls.length - 1];
    if (!last || last[1].min !== 0.5 || last[1].max !== 1.5) { fail(`${c.title}: did not follow the zoom`); break; }
  }
}
const summary = {charts: charts.length, time_charts: timeCharts.length, titles: charts.map((c) => c.title),
                 data_charts_attr: body.attrs["data-charts"], problems};
console.log(JSON.stringify(summary));
process.exit(problems.length ? 1 : 0);
