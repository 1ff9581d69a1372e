// Line charts in plain SVG: no library to vendor, nothing loaded from elsewhere.
// lineChart(element, series, options) draws every series [{name, points: [[x, y]...]}]
// on shared axes, with ticks, units and a legend, and replaces what was there before.

const SVG = "http://www.w3.org/2000/svg";
export const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#0a7b83", "#bf3989"];

function node(tag, attrs, parent) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
  if (parent) parent.appendChild(el);
  return el;
}

// Round steps (1, 2, 5 x 10^k) covering [low, high] in about `count` ticks.
export function ticks(low, high, count = 5) {
  if (!(high > low)) return [low];
  const raw = (high - low) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const first = Math.ceil(low / step) * step;
  const out = [];
  for (let v = first; v <= high + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

export function formatNumber(value) {
  const abs = Math.abs(value);
  if (abs >= 1e9) return `${(value / 1e9).toPrecision(3)}G`;
  if (abs >= 1e6) return `${(value / 1e6).toPrecision(3)}M`;
  if (abs >= 1e4) return `${(value / 1e3).toPrecision(3)}k`;
  if (abs >= 100 || abs === 0) return `${Math.round(value)}`;
  return value.toPrecision(3).replace(/\.?0+$/, "");
}

export function lineChart(element, series, options = {}) {
  const width = options.width || 640;
  const height = options.height || 240;
  const margin = { left: 56, right: 12, top: 12, bottom: 40 };
  if (options.logY) {  // plotted as log10, labelled in the values' own units
    series = series.map((s) => ({ ...s, points: s.points.filter((p) => p[1] > 0).map((p) => [p[0], Math.log10(p[1])]) }));
  }
  const label = options.logY ? (v) => formatNumber(10 ** v) : formatNumber;
  const points = series.flatMap((s) => s.points).filter((p) => Number.isFinite(p[1]));
  element.replaceChildren();
  const svg = node("svg", {
    viewBox: `0 0 ${width} ${height}`, role: "img", class: "chart",
    "aria-label": options.title || "chart",
  }, element);
  if (points.length === 0) {
    node("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty" }, svg)
      .textContent = "no samples yet";
    return svg;
  }
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [options.logY ? Math.min(...ys) : Math.min(0, ...ys), Math.max(...ys)];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const px = (x) => margin.left + ((x - x0) / (x1 - x0)) * (width - margin.left - margin.right);
  const py = (y) => height - margin.bottom - ((y - y0) / (y1 - y0)) * (height - margin.top - margin.bottom);
  const axes = node("g", { class: "axes" }, svg);
  for (const y of ticks(y0, y1)) {
    node("line", { x1: margin.left, x2: width - margin.right, y1: py(y), y2: py(y), class: "grid" }, axes);
    node("text", { x: margin.left - 6, y: py(y) + 4, "text-anchor": "end" }, axes).textContent = label(y);
  }
  for (const x of ticks(x0, x1, 6)) {
    node("text", { x: px(x), y: height - margin.bottom + 16, "text-anchor": "middle" }, axes)
      .textContent = formatNumber(x);
  }
  node("text", { x: (width + margin.left) / 2, y: height - 6, "text-anchor": "middle", class: "label" }, axes)
    .textContent = options.xLabel || "";
  node("text", {
    x: 12, y: (height - margin.bottom) / 2, "text-anchor": "middle", class: "label",
    transform: `rotate(-90 12 ${(height - margin.bottom) / 2})`,
  }, axes).textContent = (options.yLabel || "") + (options.logY ? " (log scale)" : "");
  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    const path = s.points.filter((p) => Number.isFinite(p[1]))
      .map((p, j) => `${j ? "L" : "M"}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join("");
    node("path", { d: path, fill: "none", stroke: color, "stroke-width": 2,
                   "stroke-dasharray": s.dashed ? "6 4" : "none", class: "series",
                   "data-name": s.name, "data-points": s.points.length }, svg);
    const last = s.points.filter((p) => Number.isFinite(p[1])).at(-1);
    if (last && !s.dashed) {  // the newest value, visible even while a series has one point
      node("circle", { cx: px(last[0]), cy: py(last[1]), r: 3, fill: color }, svg);
    }
  });
  if (series.length > 1 || options.legend) {
    const legend = document.createElement("div");
    legend.className = "legend";
    series.forEach((s, i) => {
      const item = document.createElement("span");
      item.style.setProperty("--swatch", s.color || COLORS[i % COLORS.length]);
      item.textContent = s.name + (s.dashed ? " (dashed)" : "");
      legend.appendChild(item);
    });
    element.appendChild(legend);
  }
  return svg;
}
