// The rightsize pages: one module, hash routes, the service's own REST API underneath.
// Every value from the API reaches the page as text (h() never parses HTML).

import { COLORS, lineChart, formatNumber } from "./charts.js";

const TOKEN_KEY = "rightsize-token";
const POLL_MS = 2000;
const main = document.getElementById("main");
let stopPage = () => {};  // the current page's timers, cleared when the route changes

// -- small helpers ------------------------------------------------------------------------
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  if (seconds < 10) return `${Number(seconds.toPrecision(2))} s`;
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toPrecision(3)} ${units[i]}`;
}

// Unix seconds as a date and time in the viewer's own zone.
export function when(unixSeconds) {
  if (!unixSeconds) return "–";
  return new Date(unixSeconds * 1000).toLocaleString(undefined, {
    dateStyle: "medium", timeStyle: "medium",
  });
}

const rate = (v) => (v === null || v === undefined ? "–" : `${formatNumber(v)} samples/s`);
const coreHours = (v) => (v === null || v === undefined ? "–" : `${v.toPrecision(3)} core-h`);
const phaseBadge = (phase) => h("span", { class: `phase ${phase}` }, phase);
const DONE = new Set(["finished", "failed", "cancelled", "interrupted"]);

function budgetText(budget) {
  const parts = [];
  if (budget.cpu !== undefined) parts.push(`${budget.cpu} CPU`);
  if (budget.memory) parts.push(bytes(budget.memory));
  return parts.join(", ") || "–";
}

// A script job's stored workload is its label: script:train.py@<hash of its text> (or
// module:NAME); its dataset, the script's arguments.
function scriptOf(job) {
  const found = /^(script|module):(.+?)(?:@([0-9a-f]+))?$/.exec(job.workload || "");
  return found && { name: found[2], hash: found[3] };
}

function programText(job) {
  const script = scriptOf(job);
  return script ? [script.name, job.dataset].filter(Boolean).join(" ") : `${job.workload} / ${job.dataset}`;
}

// One time for a job: while it runs, since it started; once it has ended, its measured time
// (the same clock: from its launch to its last step), never a second figure beside it.
function elapsed(job) {
  if (DONE.has(job.phase) && job.measured_time_s !== null && job.measured_time_s !== undefined) return job.measured_time_s;
  if (!job.started_at) return null;
  return (job.finished_at || Date.now() / 1000) - job.started_at;
}

// "(launch 3.1 s of it)": the first timeline row's transition, when it is known.
function launchPart(shapes) {
  const launch = shapes.find((s) => s.action === "launch" && s.applied);
  return launch && launch.transition_s !== null ? ` (launch ${duration(launch.transition_s)} of it)` : "";
}

function timeLeft(job, latest) {
  if (DONE.has(job.phase) || !latest || !job.samples_total || !(latest.samples_per_s > 0)) return null;
  const left = job.samples_total - latest.steps_done * job.batch_size;
  return Math.max(0, left) / latest.samples_per_s;
}

// -- the API ------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : `the service answered ${status}`);
    this.status = status;
    this.detail = detail;
  }
}

// A 401 means the token is gone or wrong: back to the sign-in form (except while signing in).
async function api(method, path, body, { signInOn401 = true } = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = (response.headers.get("content-type") || "").includes("json")
    ? await response.json() : await response.text();
  if (response.status === 401 && signInOn401) {
    signOut("Your token was not accepted: sign in again.");
    throw new ApiError(401, "not signed in");
  }
  if (!response.ok) throw new ApiError(response.status, data && data.detail !== undefined ? data.detail : data);
  return data;
}

// -- sign-in ------------------------------------------------------------------------------
function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById("nav").hidden = true;
  location.hash = "#/signin";
  if (message) sessionStorage.setItem("rightsize-message", message);
}

function signInPage() {
  const message = sessionStorage.getItem("rightsize-message");
  sessionStorage.removeItem("rightsize-message");
  const error = h("p", { class: "error", id: "error-token", role: "alert" }, message || "");
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off",
                             required: true, "aria-describedby": "error-token hint-token" });
  const form = h("form", { class: "signin panel", onsubmit: async (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      await api("GET", "/me", undefined, { signInOn401: false });
      location.hash = "#/jobs";
    } catch (exc) {
      sessionStorage.removeItem(TOKEN_KEY);
      error.textContent = exc.status === 401 ? "That token is not known to this service." : exc.message;
      input.focus();
    }
  } },
  h("div", { class: "field" },
    h("label", { for: "token" }, "API token"),
    input,
    h("span", { class: "hint", id: "hint-token" }, "Made with: rightsize serve token create NAME"),
    error),
  h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" }, "Sign in")));
  main.replaceChildren(h("h1", {}, "Sign in"), form);
  input.focus();
}

// -- queue --------------------------------------------------------------------------------
function queueTable(rows, columns) {
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : "" }, c.label)))),
    h("tbody", {}, rows.map((row) => h("tr", { "data-job": row.job.name },
      columns.map((c) => h("td", { class: c.num ? "num" : "" }, c.cell(row))))))));
}

const QUEUE_COLUMNS = [
  { label: "job", cell: (r) => h("a", { href: `#/jobs/${encodeURIComponent(r.job.name)}` }, r.job.name) },
  { label: "phase", cell: (r) => phaseBadge(r.job.phase) },
  { label: "workload", cell: (r) => programText(r.job) },
  { label: "budget", cell: (r) => budgetText(r.job.budget) },
  { label: "shape", cell: (r) => (r.latest ? r.latest.shape : "–") },
  { label: "throughput", num: true, cell: (r) => rate(r.latest && r.latest.samples_per_s) },
  { label: "elapsed", num: true, cell: (r) => duration(elapsed(r.job)) },
  { label: "predicted left", num: true, cell: (r) => duration(timeLeft(r.job, r.latest)) },
  { label: "submitted", cell: (r) => when(r.job.submitted_at) },
];

async function queuePage() {
  const body = h("div", {});
  main.replaceChildren(h("h1", {}, "Queue"), body);
  const render = (rows) => {
    const groups = [["Running", (p) => p === "running"], ["Waiting", (p) => p === "waiting"],
                    ["Finished", (p) => DONE.has(p)]];
    body.replaceChildren(...groups.map(([title, test]) => {
      const mine = rows.filter((r) => test(r.job.phase));
      if (title === "Finished") mine.reverse();
      return h("section", { "aria-label": title }, h("h2", {}, `${title} (${mine.length})`),
        mine.length ? queueTable(mine, QUEUE_COLUMNS) : h("p", { class: "muted" }, "none"));
    }));
  };
  render(await api("GET", "/queue"));
  // then live: the queue's event stream sends the rows again whenever they change
  stopPage = followEvents(() => "/queue/events", (event, rows) => { if (event === "queue") render(rows); }, () => false);
}

// -- submit -------------------------------------------------------------------------------
function field(name, label, control, hint) {
  control.id = `field-${name}`;
  control.name = name;
  const described = [`error-${name}`, hint ? `hint-${name}` : null].filter(Boolean).join(" ");
  control.setAttribute("aria-describedby", described);
  return h("div", { class: "field", "data-field": name },
    h("label", { for: control.id }, label), control,
    hint ? h("span", { class: "hint", id: `hint-${name}` }, hint) : null,
    h("p", { class: "error", id: `error-${name}`, role: "alert" }));
}

function jobFromForm(form) {
  const value = (name) => form.elements[name].value.trim();
  const job = {
    name: value("name"), workload: value("workload"), dataset: value("dataset"),
    batch_size: Number(value("batch_size")), strategy: value("strategy"),
    budget: { cpu: value("budget.cpu"), memory: value("budget.memory") },
    initial_shape: "auto", policy: { name: value("policy.name") }, constraints: {},
  };
  const length = value("length_kind");
  job[length] = Number(value("length_count"));
  if (value("dataset_size")) job.dataset_size = Number(value("dataset_size"));
  if (value("options")) {
    try { job.options = JSON.parse(value("options")); } catch { job.options = value("options"); }
  }
  if (value("constraints.deadline")) job.constraints.deadline = value("constraints.deadline");
  if (value("constraints.budget")) job.constraints.budget = value("constraints.budget");
  return job;
}

// Each 422 detail names its field (loc after "body"); it is shown under that field, or above
// the form when no field has the name.
function clearErrors(form) {
  form.querySelectorAll(".field").forEach((f) => f.classList.remove("invalid"));
  form.querySelectorAll(".error").forEach((e) => { e.textContent = ""; });
}

// A name's field, or the first shown of its stand-ins (a hidden field shows nothing).
const ALIASES = {
  steps: ["length_count"], epochs: ["length_count"],
  initial_shape: ["initial_shape.workers.count", "budget.cpu"], source: ["source", "script"],
};

function fieldNamed(form, name) {
  for (const alias of ALIASES[name] || [name]) {
    const found = form.querySelector(`[data-field="${CSS.escape(alias)}"]`);
    if (found && !found.closest("[hidden]")) return found;
  }
  return null;
}

// pydantic names a union's member in loc (initial_shape, then literal['auto'] or ShapeSpec):
// no field of the form; and beside the member's own error, "should be 'auto'" is noise.
const unionTag = (part) => /^(literal\[|[A-Z])/.test(String(part));

function errorItems(detail) {
  const items = Array.isArray(detail) ? detail : [{ loc: [], msg: String(detail) }];
  const kept = items.filter((item) => items.length === 1 || !unionTag((item.loc || []).at(-1)));
  return kept.map((item) => ({ ...item, loc: (item.loc || []).filter((p) => p !== "body" && !unionTag(p)) }));
}

function showErrors(form, detail) {
  clearErrors(form);
  const general = form.querySelector(".error[tabindex]");  // the form's own, above its fields
  let first = null;
  for (const item of errorItems(detail)) {
    let target = null;
    let n = item.loc.length;
    for (; n > 0 && !target; n -= 1) target = fieldNamed(form, item.loc.slice(0, n).join("."));
    const box = target ? target.querySelector(".error") : general;
    if (target) target.classList.add("invalid");
    // what the field shown does not name is said (a study's "rungs: Field required", not
    // "Field required" six times under the report's field)
    const rest = item.loc.slice(target ? n + 1 : 0);
    const said = rest.length ? `${rest.join(".")}: ${item.msg}` : item.msg;
    box.textContent = box.textContent ? `${box.textContent}; ${said}` : said;
    first = first || (target && target.querySelector("input, select, textarea"));
  }
  (first || general).focus();
}

function previewPanel(preview) {
  return h("div", { class: "panel", id: "preview", "aria-live": "polite" },
    h("h2", {}, "Where the service would start it"),
    h("dl", { class: "facts" },
      h("dt", {}, "launch shape"), h("dd", {}, preview.shape_text),
      h("dt", {}, "from"), h("dd", {}, `${preview.source}: ${preview.reason}`),
      h("dt", {}, "predicted time"), h("dd", {}, duration(preview.predicted_time_s)),
      h("dt", {}, "predicted cost"), h("dd", {}, coreHours(preview.predicted_core_h)),
      h("dt", {}, "prediction rests on"), h("dd", {}, preview.predicted_note || "no prediction for this workload"),
      h("dt", {}, "starts"), h("dd", {}, preview.fits_now ? "now" : `after ${preview.waiting} waiting job(s) or when capacity frees`)));
}

const money = (v) => (v === null || v === undefined ? "–" : `$${v < 10 ? v.toFixed(3) : v.toFixed(2)}`);

// A prediction's interval (the model's held-out error), when it has one.
function interval(range, format) {
  if (!range || range[0] === range[1]) return null;
  return h("span", { class: "range" }, `${format(range[0])} – ${format(range[1])}`);
}

function cloudTable(id, plans) {
  return h("div", { class: "table-wrap" }, h("table", { id },
    h("thead", {}, h("tr", {}, ["policy", "what it picks by", "configuration", "time per step", "total time", "total cost", "price", "models behind the prediction"].map((t) => h("th", {}, t)))),
    h("tbody", {}, plans.map((p) => h("tr", {},
      h("td", {}, p.policy), h("td", { class: "optimises" }, p.optimises || "–"), h("td", {}, p.config),
      h("td", { class: "num" }, `${formatNumber(p.seconds_per_iter * 1000)} ms`),
      h("td", { class: "num" }, duration(p.total_seconds), interval(p.total_seconds_interval, duration)),
      h("td", { class: "num" }, money(p.total_cost), interval(p.total_cost_interval, money)),
      h("td", { class: "num" }, `${money(p.price_per_hour)}/h`),
      h("td", {}, Object.entries(p.models).map(([k, v]) => `${k}: ${v}`).join("; ")))))));
}

function recommendationPanel(answer) {
  const part = (title, id, found, note) => [h("h3", {}, title),
    found.error ? h("p", { class: "error" }, found.error) : [note ? h("p", { class: "muted" }, note) : null, cloudTable(id, found.plans.concat(found.baselines || []))]];
  return h("div", { class: "panel", id: "recommendations" },
    h("h2", {}, "Cloud recommendations"),
    h("p", { class: "muted" }, `From the profile of ${answer.profile.workload} on ${answer.profile.dataset} measured on ${answer.profile.device}.`),
    (answer.srift.notes || []).map((n) => h("p", { class: "muted" }, `note: ${n}`)),
    part("Srift: the best configurations (CAP and TAP beside them)", "srift-plans", answer.srift),
    part("FC2: Cost-Opt, Time-Opt, Scala-Opt (and Scala-Opt-M)", "fc2-plans", answer.fc2, answer.fc2.header));
}

// -- submit: your own training script ----------------------------------------------------
// A torchrun script run unchanged on every rank (rightsize torchrun): it decides its data,
// batch and length itself, so the form asks for its arguments and its ranks only.
const SCRIPT = "script";  // the "What to train" choice for a script

// Words as a shell splits them: quotes keep spaces ('--title "a b"' is two words).
function splitArgs(text) {
  const words = text.match(/(?:"[^"]*"|'[^']*'|[^\s"'])+/g) || [];
  return words.map((w) => w.replace(/"([^"]*)"|'([^']*)'/g, "$1$2"));
}

// The name POST /scripts accepts: letters, digits, _ . - (not first), ending in .py.
function scriptFileName(name) {
  const stem = name.replace(/\.py$/, "").replace(/[^A-Za-z0-9_.-]+/g, "_").replace(/^[^A-Za-z0-9]+/, "");
  return `${(stem || "train").slice(0, 60)}.py`;
}

function kindChoice(onchange) {
  const choice = (value, label) => h("label", {},
    h("input", { type: "radio", name: "kind", value, checked: value !== SCRIPT, onchange }), ` ${label}`);
  return h("fieldset", { class: "field" }, h("legend", {}, "What to train"),
    choice("zoo", "a zoo workload"), choice(SCRIPT, "your own training script"));
}

function scriptFields() {
  return [
    field("script", "Training script", h("input", { type: "file", accept: ".py,text/x-python" }),
          "a torchrun script (e.g. DDP over gloo), run unchanged on every rank in your job's cgroups"),
    field("args", "Script arguments", h("input", { placeholder: "--epochs 3" }), "its command line after the file; quotes keep spaces"),
    field("initial_shape.workers.count", "Ranks", h("input", { type: "number", min: 1, value: 1 }), "to start with; empty: the policy chooses"),
    field("initial_shape.workers.cpu", "CPU per rank", h("input", { value: "1" }), "e.g. 1 or 500m"),
    field("initial_shape.workers.memory", "Memory per rank", h("input", { value: "1Gi" }), "e.g. 1Gi"),
  ];
}

// The file first (its errors land by its own field, as a workload file's do), then the job.
async function scriptJobFromForm(form) {
  const value = (name) => form.elements[name].value.trim();
  const file = form.elements.script.files[0];
  if (!file) throw new ApiError(422, [{ loc: ["body", "script"], msg: "choose your training script (a .py file)" }]);
  const upload = { name: scriptFileName(file.name), source: await file.text() };
  const { script } = await api("POST", "/scripts", upload);
  const ranks = value("initial_shape.workers.count");
  const rank = { count: Number(ranks), cpu: value("initial_shape.workers.cpu"), memory: value("initial_shape.workers.memory") };
  return {
    name: value("name"), script, args: splitArgs(value("args")),
    budget: { cpu: value("budget.cpu"), memory: value("budget.memory") },
    initial_shape: ranks ? { workers: rank } : "auto", policy: { name: value("policy.name") },
  };
}

async function submitPage() {
  const choices = await api("GET", "/choices");
  // defaults the service accepts: a budget within its capacity, and a policy that fits it
  // (NEARCHUS+ needs a budget of 2 CPUs or more; DLRover sizes any)
  const defaultCpu = Math.min(2, choices.capacity.cpu);
  const zooPolicy = defaultCpu >= 2 ? "nearchus+" : "dlrover";
  const models = Object.fromEntries(choices.models.map((m) => [m.name, m]));
  const workload = h("select", {}, choices.models.map((m) => h("option", { value: m.name }, `${m.name} — ${m.description}`)),
                    h("option", { value: UPLOAD }, "my own file (a workload factory)"));
  const dataset = h("select", {});
  const uploadFile = h("input", { type: "file", accept: ".py,text/x-python" });
  const uploadFields = [
    field("source", "Workload file", uploadFile, "a Python file whose function returns a rightsize.workloads.Workload; it runs only in your job's cgroups"),
    field("factory", "Factory function", h("input", { value: "make_workload" })),
  ];
  const fillDatasets = () => {
    const own = workload.value === UPLOAD;
    uploadFields.forEach((f) => { f.hidden = !own; });
    dataset.closest(".field")?.toggleAttribute("hidden", own);
    if (own) return;
    const model = models[workload.value];
    dataset.replaceChildren(...model.datasets.map((d) => h("option", { value: d, selected: d === model.default_dataset }, d)));
  };
  workload.addEventListener("change", fillDatasets);
  workload.value = models["wide-deep"] ? "wide-deep" : choices.models[0].name;
  const lengthKind = h("select", {}, h("option", { value: "epochs" }, "epochs"), h("option", { value: "steps" }, "steps"));
  const result = h("div", {});
  const recommendations = h("div", { "aria-live": "polite" });
  const cloudForm = h("form", { class: "job", novalidate: true, id: "cloud-form" },
    h("p", { class: "error", id: "error-cloud", role: "alert", tabindex: "-1", style: "grid-column: 1 / -1" }),
    field("global_batch", "Global batch", h("input", { type: "number", min: 1, value: 1024 }), "samples per step over all VMs"),
    field("iterations", "Iterations", h("input", { type: "number", min: 1, value: 10000 }), "training steps"),
    field("cloud", "Cloud", h("select", {}, ["aws", "gcp", "azure"].map((c) => h("option", { value: c }, c)))),
    field("instances", "Instance types", h("input", { placeholder: "g4dn.xlarge:8,p3.2xlarge:4" }), "optional; default every GPU type"),
    field("fc2_worker_type", "Scala-Opt-M worker type", h("input", { placeholder: "g4dn.xlarge" }), "optional: FC2's Scala-Opt for a worker type you choose"),
    field("spot", "Spot prices", h("select", {}, h("option", { value: "no" }, "no"), h("option", { value: "yes" }, "yes"))),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Recommend cloud clusters")));
  cloudForm.addEventListener("submit", (event) => { event.preventDefault(); recommend(); });
  let polling = null;
  stopPage = () => clearTimeout(polling);
  async function recommend() {
    clearTimeout(polling);
    const value = (name) => cloudForm.elements[name].value.trim();
    const job = jobFromForm(form);
    const body = {
      workload: job.workload, dataset: job.dataset, options: typeof job.options === "object" ? job.options : {},
      global_batch: Number(value("global_batch")), iterations: Number(value("iterations")),
      constraints: job.constraints, cloud: value("cloud"), instances: value("instances"), spot: value("spot") === "yes",
    };
    if (value("fc2_worker_type")) body.fc2_worker_type = value("fc2_worker_type");
    try {
      const response = await fetch("/recommendations", { method: "POST", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` } });
      const answer = await response.json();
      if (response.status === 202) {
        const since = answer.profiling.started_at ? ` (since ${when(answer.profiling.started_at)})` : "";
        recommendations.replaceChildren(h("p", { class: "panel", id: "profiling" }, `Profiling ${answer.profiling.workload} on this machine${since}: about a minute; the plans follow.`));
        polling = setTimeout(recommend, 3000);
        return;
      }
      if (!response.ok) throw new ApiError(response.status, answer.detail);
      clearErrors(cloudForm);
      recommendations.replaceChildren(recommendationPanel(answer));
    } catch (exc) {
      recommendations.replaceChildren();
      showErrors(cloudForm, exc.detail !== undefined ? exc.detail : exc.message);
    }
  }
  const zooOnly = [], scriptOnly = [];
  const showKind = () => {
    const own = form.elements.kind.value === SCRIPT;
    zooOnly.forEach((group) => { group.hidden = own; });
    scriptOnly.forEach((group) => { group.hidden = !own; });
    form.elements["policy.name"].value = own ? "goodput" : zooPolicy;
    clearErrors(form);
    result.replaceChildren();
  };
  const group = (list, hidden, ...fields) => {  // fields shown for one choice only
    const g = h("div", { class: "fields", hidden }, fields);
    list.push(g);
    return g;
  };
  const form = h("form", { class: "job", novalidate: true },
    h("p", { class: "error", id: "error-form", role: "alert", tabindex: "-1", style: "grid-column: 1 / -1" }),
    kindChoice(showKind),
    field("name", "Job name", h("input", { value: "my-job", required: true })),
    group(scriptOnly, true, scriptFields()),
    group(zooOnly, false,
      field("workload", "Workload", workload),
      field("dataset", "Dataset", dataset),
      uploadFields,
      field("options", "Model options", h("input", { placeholder: '{"width": 2}' }), "JSON, optional"),
      field("dataset_size", "Dataset size", h("input", { type: "number", min: 1, value: 20000 }), "samples (synthetic data)"),
      field("batch_size", "Batch per worker", h("input", { type: "number", min: 1, value: 512 }), "samples per step"),
      field("length_kind", "Train for", lengthKind),
      field("length_count", "How many", h("input", { type: "number", min: 1, value: 1 }), "epochs or steps"),
      field("strategy", "Strategy", h("select", {}, choices.strategies.map((s) => h("option", { value: s }, s))))),
    field("budget.cpu", "CPU budget", h("input", { value: String(defaultCpu) }), `cores the job may hold at most (this service has ${choices.capacity.cpu}), e.g. 2 or 1500m`),
    field("budget.memory", "Memory budget", h("input", { value: "4Gi" }), "e.g. 4Gi"),
    field("policy.name", "Policy", h("select", {}, choices.policies.map((p) => h("option", { value: p, selected: p === zooPolicy }, p)))),
    group(zooOnly, false,
      field("constraints.deadline", "Deadline", h("input", { placeholder: "2h" }), "optional, for plans"),
      field("constraints.budget", "Dollar budget", h("input", { placeholder: "$30" }), "optional, for plans")),
    h("div", { class: "actions" },
      h("button", { type: "button", id: "preview-button", onclick: () => send("/jobs/preview") }, "Preview"),
      h("button", { type: "submit", class: "primary" }, "Submit")));
  form.addEventListener("submit", (event) => { event.preventDefault(); send("/jobs"); });
  fillDatasets();
  async function zooJob() {
    const job = jobFromForm(form);
    if (workload.value === UPLOAD) {  // the file first: its errors land by its own fields
      const file = uploadFile.files[0];
      if (!file) throw new ApiError(422, [{ loc: ["body", "source"], msg: "choose the workload file" }]);
      const name = file.name.replace(/\.py$/, "").toLowerCase().replace(/[^a-z0-9_]+/g, "_").replace(/^[^a-z]+/, "") || "workload";
      const body = { name: name.slice(0, 40), source: await file.text(), factory: form.elements.factory.value.trim() };
      job.workload = (await api("POST", "/workloads", body)).workload;
      delete job.dataset;
    }
    return job;
  }
  async function send(path) {
    try {
      const job = form.elements.kind.value === SCRIPT ? await scriptJobFromForm(form) : await zooJob();
      const answer = await api("POST", path, job);
      clearErrors(form);
      if (path === "/jobs") location.hash = `#/jobs/${encodeURIComponent(answer.name)}`;
      else result.replaceChildren(previewPanel(answer));
    } catch (exc) {
      if (exc.status === 401) return;
      showErrors(form, exc.detail !== undefined ? exc.detail : exc.message);
    }
  }
  main.replaceChildren(h("h1", {}, "Submit a job"), form, result, group(zooOnly, false,
    h("h2", {}, "Where it would run in a cloud"),
    h("p", { class: "muted" }, "Srift's and FC2's recommendations for the workload above, with its deadline and dollar budget."),
    cloudForm, recommendations));
}

// -- one run ------------------------------------------------------------------------------
// One series per node, each node in its own colour (its allocation, dashed, in the same one).
function nodeSeries(samples, pick) {
  const byNode = new Map();
  for (const s of samples) {
    for (const n of s.nodes || []) {
      if (!byNode.has(n.node)) byNode.set(n.node, []);
      byNode.get(n.node).push([s.time_s, pick(n)]);
    }
  }
  return [...byNode.entries()].map(([name, points], i) => ({ name, points, color: COLORS[i % COLORS.length] }));
}

const allocatedSeries = (series) => series.map((s) => ({ ...s, name: `${s.name} allocated`, dashed: true }));

function chartBox(id, title) {
  return h("div", { class: "chart-box", id }, h("h3", {}, title), h("div", { class: "plot" }));
}

function drawRunCharts(container, samples) {
  const plot = (id) => container.querySelector(`#${id} .plot`);
  lineChart(plot("chart-throughput"), [{ name: "throughput", points: samples.map((s) => [s.time_s, s.samples_per_s]) }],
            { xLabel: "time since launch (s)", yLabel: "samples/s", title: "throughput" });
  lineChart(plot("chart-loss"), [{ name: "loss", points: samples.filter((s) => s.loss !== null).map((s) => [s.time_s, s.loss]) }],
            { xLabel: "time since launch (s)", yLabel: "loss", title: "loss" });
  const used = nodeSeries(samples, (n) => n.cpu_used);
  const allocated = allocatedSeries(nodeSeries(samples, (n) => n.cpu_allocated));
  lineChart(plot("chart-cpu"), [...used, ...allocated], { xLabel: "time since launch (s)", yLabel: "CPU cores", title: "CPU per node" });
  const memory = nodeSeries(samples, (n) => n.memory_used / 2 ** 20);
  const memoryAllocated = allocatedSeries(nodeSeries(samples, (n) => n.memory_allocated / 2 ** 20));
  lineChart(plot("chart-memory"), [...memory, ...memoryAllocated], { xLabel: "time since launch (s)", yLabel: "MiB", title: "memory per node" });
  const network = [...nodeSeries(samples, (n) => (n.net_in + n.net_out) / 2 ** 20)];
  lineChart(plot("chart-network"), network, { xLabel: "time since launch (s)", yLabel: "MiB/s in + out", title: "network per node", legend: true });
}

function latestNodesTable(sample) {
  if (!sample || !sample.nodes.length) return h("p", { class: "muted" }, "no node samples yet");
  return h("div", { class: "table-wrap" }, h("table", { id: "nodes" },
    h("thead", {}, h("tr", {}, ["node", "role", "CPU used / allocated", "memory used / allocated", "network in", "network out", "steps/s"].map((t) => h("th", {}, t)))),
    h("tbody", {}, sample.nodes.map((n) => h("tr", {},
      h("td", {}, n.node), h("td", {}, n.role),
      h("td", {}, `${n.cpu_used.toFixed(2)} / ${n.cpu_allocated.toFixed(2)} cores`),
      h("td", {}, `${bytes(n.memory_used)} / ${bytes(n.memory_allocated)}`),
      h("td", {}, `${bytes(n.net_in)}/s`), h("td", {}, `${bytes(n.net_out)}/s`),
      h("td", {}, n.steps_per_s.toFixed(2)))))));
}

function timelineTable(shapes) {
  return h("div", { class: "table-wrap" }, h("table", { id: "timeline" },
    h("thead", {}, h("tr", {}, ["at", "action", "applied", "transition", "shape", "reason"].map((t) => h("th", {}, t)))),
    h("tbody", {}, shapes.map((s) => h("tr", {},
      h("td", {}, `${s.time_s.toFixed(1)} s`), h("td", {}, s.action), h("td", {}, s.applied ? "yes" : "no"),
      h("td", {}, duration(s.transition_s)), h("td", {}, describeShape(s.shape)), h("td", {}, s.reason))))));
}

function describeShape(shape) {
  const nodes = shape.nodes || [];
  const roles = {};
  for (const n of nodes) {
    const r = (roles[n.role] = roles[n.role] || { count: 0, cpu: 0 });
    r.count += 1;
    r.cpu += n.cpu || 0;
  }
  return Object.entries(roles).map(([role, r]) => `${r.count} ${role}${r.count > 1 ? "s" : ""} (${r.cpu.toFixed(2)} CPU)`).join(" + ") || "–";
}

function accountingText(accounting) {
  if (accounting && !accounting.checked && accounting.data) return accounting.data;  // a script's own sampler
  if (!accounting || !accounting.checked) return "not checked yet";
  return accounting.exactly_once ? "every sample trained exactly once per epoch" : "NOT exactly once: see the report";
}

const HAS_REPORT = new Set(["finished", "failed"]);
const UPLOAD = "__upload__";  // the workload select's "my own file"

async function downloadReport(name) {
  let report;
  try {
    report = await api("GET", `/jobs/${encodeURIComponent(name)}/report`);
  } catch (exc) {
    window.alert(`No report for ${name}: ${exc.message}`);
    return;
  }
  const link = h("a", { href: URL.createObjectURL(new Blob([JSON.stringify(report, null, 2)], { type: "application/json" })),
                        download: `${name}-report.json` });
  document.body.append(link);
  link.click();
  link.remove();
}

// What the job trains: a workload and dataset, or a script and its arguments.
function programFacts(job) {
  const script = scriptOf(job);
  if (!script) return [h("dt", {}, "workload"), h("dd", {}, `${job.workload} on ${job.dataset}, batch ${job.batch_size}, ${job.policy}`)];
  return [h("dt", {}, "script"), h("dd", { id: "script" }, script.name, script.hash ? h("span", { class: "muted" }, ` (text ${script.hash})`) : null),
          h("dt", {}, "arguments"), h("dd", { id: "args" }, job.dataset || "none"),
          h("dt", {}, "policy"), h("dd", {}, job.policy)];
}

function movesTable(moves) {
  if (!moves.length) return h("p", { class: "muted", id: "moves" }, "none: no plan after the launch");
  return h("div", { class: "table-wrap" }, h("table", { id: "moves" },
    h("thead", {}, h("tr", {}, ["at", "action", "taken", "reason"].map((t) => h("th", {}, t)))),
    h("tbody", {}, moves.map((m) => h("tr", {},
      h("td", {}, `${m.time_s.toFixed(1)} s`), h("td", {}, m.action), h("td", {}, m.taken ? "yes" : "no"), h("td", {}, m.reason))))));
}

// A script job's report's moves: each plan after the launch, taken or not, and why.
async function movesSection(path) {
  const report = await api("GET", `${path}/report`).catch(() => null);
  return report && Array.isArray(report.moves) ? [h("h2", {}, "Moves"), movesTable(report.moves)] : [];
}

// A job's server-sent events (service/live.py) read with fetch, which can send the token
// (EventSource cannot); a broken stream is opened again after the last sample it gave.
function followEvents(url, onEvent, finished) {
  const controller = new AbortController();
  let stopped = false;
  const dispatch = (block) => {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).trim());
    }
    if (data.length) onEvent(name, JSON.parse(data.join("\n")));
  };
  (async () => {
    while (!stopped && !finished()) {
      try {
        const response = await fetch(url(), { signal: controller.signal, headers: {
          Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}`, Accept: "text/event-stream" } });
        if (response.status === 401) { signOut("Your token was not accepted: sign in again."); return; }
        if (!response.ok) throw new ApiError(response.status, "the event stream was refused");
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          for (let cut = buffer.indexOf("\n\n"); cut >= 0; cut = buffer.indexOf("\n\n")) {
            dispatch(buffer.slice(0, cut));
            buffer = buffer.slice(cut + 2);
          }
        }
      } catch (exc) {
        if (stopped) return;
      }
      if (!stopped && !finished()) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  })();
  return () => { stopped = true; controller.abort(); };
}

async function runPage(name) {
  const path = `/jobs/${encodeURIComponent(name)}`;
  const header = h("div", {});
  const charts = h("div", { class: "charts" },
    chartBox("chart-throughput", "Throughput"), chartBox("chart-loss", "Loss"),
    chartBox("chart-cpu", "CPU per node against its allocation"),
    chartBox("chart-memory", "Memory per node against its allocation"),
    chartBox("chart-network", "Network per node"));
  const nodes = h("div", {});
  const timeline = h("div", {});
  const moves = h("div", {});
  const noSamples = h("p", { class: "muted", id: "no-samples", hidden: true });
  main.replaceChildren(h("h1", {}, name), header, h("h2", {}, "Charts"), noSamples, charts,
                       h("h2", {}, "Nodes now"), nodes, h("h2", {}, "Timeline of shapes"), timeline, moves);
  // the page's state: the job, its timeline rows by seq, its samples in order
  const detail = await api("GET", path);
  let job = detail.job;
  const shapes = new Map(detail.shapes.map((s) => [s.seq, s]));
  const samples = await api("GET", `${path}/samples`);
  let movesAsked = false;
  const done = () => DONE.has(job.phase);
  const render = async () => {
    const actions = h("div", { class: "actions" });
    if (!done()) actions.append(h("button", { class: "danger", id: "cancel", type: "button", onclick: async () => {
      // a cancel stops the job for good (a running one checkpoints first): asked once more
      const what = job.phase === "running" ? "It checkpoints and stops; it cannot be resumed." : "It leaves the queue.";
      if (!window.confirm(`Cancel ${name}? ${what}`)) return;
      job = await api("POST", `${path}/cancel`);  // the stream says the rest
      render();
    } }, "Cancel"));
    if (HAS_REPORT.has(job.phase)) actions.append(h("button", { type: "button", id: "download", onclick: () => downloadReport(name) }, "Download report JSON"));
    const latest = samples[samples.length - 1];
    header.replaceChildren(h("div", { class: "panel" }, h("dl", { class: "facts" },
      h("dt", {}, "phase"), h("dd", { id: "phase" }, phaseBadge(job.phase)),
      programFacts(job),
      h("dt", {}, "budget"), h("dd", {}, budgetText(job.budget)),
      h("dt", {}, "started"), h("dd", {}, `${when(job.started_at)}${job.launch_source ? ` from ${job.launch_source}: ${job.launch_note}` : ""}`),
      h("dt", {}, "throughput now"), h("dd", { id: "throughput-now" }, rate(latest && latest.samples_per_s)),
      h("dt", {}, "elapsed"), h("dd", {}, duration(elapsed(job))),
      h("dt", {}, "predicted left"), h("dd", {}, duration(timeLeft(job, latest))),
      h("dt", {}, "time, launch included"), h("dd", { id: "time-compare" }, `predicted ${duration(job.predicted_time_s)}, measured ${duration(job.measured_time_s)}${job.measured_time_s === null ? "" : launchPart([...shapes.values()])}`),
      h("dt", {}, "cost"), h("dd", {}, `predicted ${coreHours(job.predicted_core_h)}, measured ${coreHours(job.measured_core_h)}`),
      h("dt", {}, "prediction rests on"), h("dd", {}, job.predicted_note || "–"),
      h("dt", {}, "exactly once"), h("dd", { id: "accounting" }, accountingText(job.accounting)),
      job.error ? [h("dt", {}, "error"), h("dd", { class: "error" }, job.error)] : []), actions));
    // no samples yet (waiting) or ever (cancelled before it ran): one line, not five empty charts
    charts.hidden = samples.length === 0;
    noSamples.hidden = samples.length > 0;
    noSamples.textContent = done() ? "It ended before its first metric sample." : "No metric samples yet: they start once the job runs.";
    if (samples.length) drawRunCharts(charts, samples);
    nodes.replaceChildren(latestNodesTable(latest));
    timeline.replaceChildren(timelineTable([...shapes.values()].sort((a, b) => a.seq - b.seq)));
    if (!movesAsked && scriptOf(job) && HAS_REPORT.has(job.phase)) {
      movesAsked = true;
      moves.replaceChildren(...await movesSection(path));
    }
  };
  await render();
  let pending = null;  // events come in bursts (a sample, then a move): one render for each burst
  const later = () => { pending = pending || setTimeout(() => { pending = null; render().catch(() => {}); }, 200); };
  const stop = followEvents(() => `${path}/events?after=${samples.length ? samples[samples.length - 1].seq : 0}`,
    (event, data) => {
      if (event === "sample") samples.push(data);
      else if (event === "shape") shapes.set(data.seq, data);
      else if (event === "job" || event === "end") job = data;
      later();
    }, done);
  stopPage = () => { stop(); clearTimeout(pending); };
}

// -- past runs and comparing them ---------------------------------------------------------
const RUN_COLUMNS = [
  ["name", "job", (j) => j.name],
  ["phase", "phase", (j) => j.phase],
  ["workload", "workload", (j) => j.workload],
  ["policy", "policy", (j) => j.policy],
  ["finished_at", "finished", (j) => j.finished_at || 0],
  ["measured_time_s", "time", (j) => j.measured_time_s ?? -1],
  ["best_samples_per_s", "best throughput", (j) => j.best_samples_per_s ?? -1],
  ["measured_core_h", "core-hours", (j) => j.measured_core_h ?? -1],
];

async function runsPage() {
  const jobs = (await api("GET", "/jobs")).filter((j) => DONE.has(j.phase));
  let sortKey = "finished_at", ascending = false;
  const chosen = new Set();
  const filter = h("input", { id: "filter", type: "search", placeholder: "name, workload, policy or phase" });
  const compare = h("button", { type: "button", id: "compare", class: "primary", disabled: true,
    onclick: () => { location.hash = `#/compare/${[...chosen].map(encodeURIComponent).join(",")}`; } }, "Compare selected");
  const table = h("div", { class: "table-wrap" });
  const render = () => {
    const words = filter.value.trim().toLowerCase();
    const shown = jobs.filter((j) => !words || [j.name, j.workload, j.policy, j.phase].join(" ").toLowerCase().includes(words));
    const [, , key] = RUN_COLUMNS.find(([k]) => k === sortKey);
    shown.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0) * (ascending ? 1 : -1));
    table.replaceChildren(h("table", { id: "runs" },
      h("thead", {}, h("tr", {}, h("th", {}, h("span", { class: "muted" }, "pick")),
        RUN_COLUMNS.map(([k, label]) => h("th", { "aria-sort": k === sortKey ? (ascending ? "ascending" : "descending") : "none" },
          h("button", { type: "button", "data-sort": k, onclick: () => { ascending = k === sortKey ? !ascending : true; sortKey = k; render(); } },
            label + (k === sortKey ? (ascending ? " ▲" : " ▼") : "")))))),
      h("tbody", {}, shown.map((j) => h("tr", { "data-job": j.name },
        h("td", {}, h("input", { type: "checkbox", "aria-label": `compare ${j.name}`, checked: chosen.has(j.name),
          onchange: (e) => { e.target.checked ? chosen.add(j.name) : chosen.delete(j.name); compare.disabled = chosen.size < 2; } })),
        h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(j.name)}` }, j.name)),
        h("td", {}, phaseBadge(j.phase)), h("td", {}, programText(j)), h("td", {}, j.policy),
        h("td", {}, when(j.finished_at)), h("td", { class: "num" }, duration(j.measured_time_s)),
        h("td", { class: "num" }, rate(j.best_samples_per_s)), h("td", { class: "num" }, coreHours(j.measured_core_h)))))));
  };
  filter.addEventListener("input", render);
  main.replaceChildren(h("h1", {}, "Past runs"),
    h("div", { class: "toolbar" }, h("div", { class: "field" }, h("label", { for: "filter" }, "Filter"), filter), compare),
    jobs.length ? table : h("p", { class: "muted" }, "No finished runs yet."));
  render();
}

async function comparePage(names) {
  const runs = await Promise.all(names.map(async (name) => {
    const path = `/jobs/${encodeURIComponent(name)}`;
    const [detail, samples] = await Promise.all([api("GET", path), api("GET", `${path}/samples`)]);
    return { name, job: detail.job, samples };
  }));
  const charts = h("div", { class: "charts" }, chartBox("chart-throughput", "Throughput"), chartBox("chart-loss", "Loss"));
  main.replaceChildren(h("h1", {}, `Comparing ${names.join(", ")}`),
    h("div", { class: "table-wrap" }, h("table", { id: "comparison" },
      h("thead", {}, h("tr", {}, ["job", "launched from", "time", "time to 95% of best", "best throughput", "core-hours", "exactly once", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, runs.map((r) => h("tr", {},
        h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(r.name)}` }, r.name)),
        h("td", {}, r.job.launch_source || "–"), h("td", { class: "num" }, duration(r.job.measured_time_s)),
        h("td", { class: "num" }, duration(r.job.time_to_95_s)), h("td", { class: "num" }, rate(r.job.best_samples_per_s)),
        h("td", { class: "num" }, coreHours(r.job.measured_core_h)), h("td", {}, accountingText(r.job.accounting)),
        h("td", {}, HAS_REPORT.has(r.job.phase) ? h("button", { type: "button", onclick: () => downloadReport(r.name) }, "report JSON") : "no report")))))),
    charts);
  lineChart(charts.querySelector("#chart-throughput .plot"), runs.map((r) => ({ name: r.name, points: r.samples.map((s) => [s.time_s, s.samples_per_s]) })),
            { xLabel: "time since launch (s)", yLabel: "samples/s", title: "throughput", legend: true });
  lineChart(charts.querySelector("#chart-loss .plot"), runs.map((r) => ({ name: r.name, points: r.samples.filter((s) => s.loss !== null).map((s) => [s.time_s, s.loss]) })),
            { xLabel: "time since launch (s)", yLabel: "loss", title: "loss", legend: true });
}

// -- simulations --------------------------------------------------------------------------
const pct = (v) => (v === null || v === undefined ? "–" : `${v >= 0 ? "+" : ""}${(v * 100).toFixed(1)}%`);

async function simulationsPage() {
  const choices = await api("GET", "/choices");
  const defaults = new Set(["nearchus", "nearchus+", "dlrover", "optimus", "fa-bf"]);
  const traceKind = h("select", {}, h("option", { value: "nearchus-40" }, "nearchus-40 (NEARCHUS §V: 40 jobs)"),
                      h("option", { value: "upload" }, "a CSV of my own"));
  const file = h("input", { type: "file", accept: ".csv,text/csv" });
  const policies = h("fieldset", { class: "field", "data-field": "policies" }, h("legend", {}, "Policies"),
    choices.policies_by_strategy.ps.map((p) => h("label", {}, h("input", { type: "checkbox", name: "policy", value: p, checked: defaults.has(p) }), ` ${p}`)),
    h("p", { class: "error", id: "error-policies", role: "alert" }));
  const form = h("form", { class: "job", novalidate: true },
    h("p", { class: "error", id: "error-form", role: "alert", tabindex: "-1", style: "grid-column: 1 / -1" }),
    field("trace", "Trace", traceKind),
    field("trace_csv", "Trace CSV", file, "Pollux's name,time,application,num_replicas,batch_size, or arrival,duration,cpu"),
    field("cluster", "Cluster", h("input", { value: "A" }), "A (100 vCPU, 1 Gbps), B (300 vCPU, 50 Gbps) or cpu=N,net_gbps=G"),
    field("seed", "Seed", h("input", { type: "number", min: 0, value: 1 })),
    field("order", "Queue order", h("select", {}, h("option", { value: "fcfs" }, "first come"), h("option", { value: "sjf" }, "shortest first"))),
    policies,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Run the simulation")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      trace: traceKind.value, cluster: form.elements.cluster.value.trim(), seed: Number(form.elements.seed.value),
      order: form.elements.order.value, policies: [...form.querySelectorAll('input[name="policy"]:checked')].map((c) => c.value),
    };
    if (body.trace === "upload" && file.files.length) {
      body.trace_csv = await file.files[0].text();
      body.trace_name = file.files[0].name;
    }
    try {
      const started = await api("POST", "/simulations", body);
      location.hash = `#/simulations/${started.id}`;
    } catch (exc) {
      if (exc.status !== 401) showErrors(form, exc.detail !== undefined ? exc.detail : exc.message);
    }
  });
  const mine = await api("GET", "/simulations");
  main.replaceChildren(h("h1", {}, "Simulations"),
    h("p", { class: "muted" }, "Policies compared on a simulated cluster (NEARCHUS §V): simulated, not measured."),
    form, h("h2", {}, "Your simulations"),
    mine.length ? h("div", { class: "table-wrap" }, h("table", { id: "simulations" },
      h("thead", {}, h("tr", {}, ["simulation", "trace", "cluster", "policies", "phase", "started"].map((t) => h("th", {}, t)))),
      h("tbody", {}, mine.slice().reverse().map((m) => h("tr", {},
        h("td", {}, h("a", { href: `#/simulations/${m.id}` }, `#${m.id}`)), h("td", {}, m.trace), h("td", {}, m.request.cluster),
        h("td", {}, m.request.policies.join(", ")), h("td", {}, phaseBadge(m.phase)), h("td", {}, when(m.created_at)))))))
      : h("p", { class: "muted" }, "none yet"));
}

async function plotImage(id, path, alt) {
  const response = await fetch(path, { headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` } });
  if (!response.ok) return h("p", { class: "muted" }, `${alt}: not drawn`);
  return h("figure", { id }, h("img", { src: URL.createObjectURL(await response.blob()), alt }), h("figcaption", {}, alt));
}

async function simulationPage(id) {
  const body = h("div", {});
  main.replaceChildren(h("h1", {}, `Simulation #${id}`), body);
  const refresh = async () => {
    const sim = await api("GET", `/simulations/${id}`);
    const facts = h("div", { class: "panel" }, h("dl", { class: "facts" },
      h("dt", {}, "phase"), h("dd", { id: "phase" }, phaseBadge(sim.phase)),
      h("dt", {}, "trace"), h("dd", {}, sim.trace),
      h("dt", {}, "cluster"), h("dd", {}, sim.result ? `${sim.request.cluster}` : sim.request.cluster),
      h("dt", {}, "policies"), h("dd", {}, sim.request.policies.join(", ")),
      h("dt", {}, "seed, order"), h("dd", {}, `${sim.request.seed}, ${sim.request.order}`),
      h("dt", {}, "started"), h("dd", {}, when(sim.created_at)),
      sim.error ? [h("dt", {}, "error"), h("dd", { class: "error" }, sim.error)] : []));
    if (sim.phase === "running") {
      body.replaceChildren(facts, h("p", { class: "muted" }, "Simulating…"));
      return false;
    }
    if (!sim.result) {
      body.replaceChildren(facts);
      return true;
    }
    const rows = sim.result.results;
    const table = h("div", { class: "table-wrap" }, h("table", { id: "policies" },
      h("thead", {}, h("tr", {}, ["policy", "avg JCT", "vs first", "avg queue", "avg run", "makespan", "CPU used", "CPU allocated", "restarts", "failed"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map((r) => h("tr", {},
        h("td", {}, r.policy), h("td", { class: "num" }, duration(r.avg_jct_s)), h("td", { class: "num" }, pct(r.jct_change_vs_first)),
        h("td", { class: "num" }, duration(r.avg_queue_s)), h("td", { class: "num" }, duration(r.avg_run_s)),
        h("td", { class: "num" }, duration(r.makespan_s)), h("td", { class: "num" }, `${r.cpu_used_pct.toFixed(1)}%`),
        h("td", { class: "num" }, `${r.cpu_allocated_pct.toFixed(1)}%`), h("td", { class: "num" }, r.restarts), h("td", { class: "num" }, r.failed))))));
    const names = [["plot-jct", "jct_breakdown.png", "job completion time: queue and run, per policy"],
                   ["plot-utilization", "utilization.png", "CPU used and allocated over time, per policy"],
                   ["plot-throughput", "throughput.png", "one job's speed over time, per policy"]];
    const plots = await Promise.all(names.map(([pid, file, alt]) => plotImage(pid, `/simulations/${id}/plots/${file}`, alt)));
    body.replaceChildren(facts, h("p", { class: "muted" }, sim.result.note), table, h("div", { class: "charts plots" }, plots));
    return true;
  };
  if (await refresh()) return;
  const timer = setInterval(async () => { if (await refresh().catch(() => false)) clearInterval(timer); }, POLL_MS);
  stopPage = () => clearInterval(timer);
}

// -- studies (rightsize tune) -------------------------------------------------------------
const configText = (config) => Object.entries(config || {}).map(([k, v]) => `${k}=${v}`).join(", ");

async function studiesPage() {
  const file = h("input", { type: "file", accept: ".json,application/json" });
  const form = h("form", { class: "job", novalidate: true },
    h("p", { class: "error", id: "error-form", role: "alert", tabindex: "-1", style: "grid-column: 1 / -1" }),
    field("name", "Study name", h("input", { value: "my-search" })),
    field("report", "Search report", file, "the JSON of rightsize tune ... --json"),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Keep the study")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let report;
    try {
      report = JSON.parse(file.files.length ? await file.files[0].text() : "");
    } catch {
      showErrors(form, [{ loc: ["body", "report"], msg: "not a JSON file: give the output of rightsize tune --json" }]);
      return;
    }
    try {
      const study = await api("POST", "/studies", { name: form.elements.name.value.trim(), report });
      location.hash = `#/studies/${study.id}`;
    } catch (exc) {
      if (exc.status !== 401) showErrors(form, exc.detail !== undefined ? exc.detail : exc.message);
    }
  });
  const mine = await api("GET", "/studies");
  main.replaceChildren(h("h1", {}, "Studies"),
    h("p", { class: "muted" }, "Packed Hyperband searches (rightsize tune): brackets, rungs, each trial's curve, and which trials trained together. " +
      "A search run on this service's store lands here by itself (with $RIGHTSIZE_TOKEN set it is yours; without, the host's); a report from elsewhere can be uploaded."),
    h("h2", {}, "Studies"),
    mine.length ? h("div", { class: "table-wrap" }, h("table", { id: "studies" },
      h("thead", {}, h("tr", {}, ["study", "workload", "best validation loss", "best configuration", "whose", "kept"].map((t) => h("th", {}, t)))),
      h("tbody", {}, mine.slice().reverse().map((m) => h("tr", { "data-study": m.name },
        h("td", {}, h("a", { href: `#/studies/${m.id}` }, m.name)), h("td", {}, `${m.workload} / ${m.dataset}`),
        h("td", { class: "num" }, m.best.val_loss === undefined ? "–" : m.best.val_loss.toPrecision(4)),
        h("td", {}, configText(m.best.config)), h("td", {}, m.host ? "the host's (no token)" : "yours"),
        h("td", {}, when(m.created_at)))))))
      : h("p", { class: "muted" }, "none yet"),
    h("h2", {}, "Upload a report"), form);
}

async function studyPage(id) {
  const study = await api("GET", `/studies/${id}`);
  const report = study.report;
  const curves = new Map();  // trial -> [[resource, loss]] over the rungs it reached
  for (const rung of report.rungs) {
    for (const [trial, loss] of Object.entries(rung.losses)) {
      if (!curves.has(trial)) curves.set(trial, []);
      curves.get(trial).push([rung.r, loss]);
    }
  }
  const best = report.best.trial_id;
  const series = [...curves.entries()].sort(([a], [b]) => (a === best ? -1 : b === best ? 1 : 0))
    .map(([trial, points]) => ({ name: trial === best ? `${trial} (best)` : trial, points: points.sort((p, q) => p[0] - q[0]) }));
  const chart = chartBox("chart-trials", "Each trial's validation loss at each rung it reached");
  main.replaceChildren(h("h1", {}, `Study ${study.name}`),
    h("div", { class: "panel" }, h("dl", { class: "facts" },
      h("dt", {}, "workload"), h("dd", {}, `${report.workload} on ${report.dataset}`),
      h("dt", {}, "Hyperband"), h("dd", {}, `R = ${report.max_resource}, η = ${report.eta}${report.steps_per_unit ? `, ${report.steps_per_unit} steps per unit` : ""}`),
      h("dt", {}, "packing"), h("dd", {}, report.strategy || "–"),
      h("dt", {}, "trials"), h("dd", {}, `${Object.keys(report.trials).length} of ${report.space_size ?? "?"} configurations`),
      h("dt", {}, "wall time"), h("dd", {}, duration(report.wall_s)),
      h("dt", {}, "best"), h("dd", { id: "best" }, `${best}: ${configText(report.best.config)}, validation loss ${Number(report.best.val_loss).toPrecision(4)} at r = ${report.best.resource}`))),
    h("div", { class: "charts" }, chart),
    h("h2", {}, "Brackets and rungs"),
    h("div", { class: "table-wrap" }, h("table", { id: "rungs" },
      h("thead", {}, h("tr", {}, ["bracket", "rung", "trials", "resource r", "steps", "wall time", "trained together"].map((t) => h("th", {}, t)))),
      h("tbody", {}, report.rungs.map((r) => h("tr", {},
        h("td", { class: "num" }, `s=${r.bracket}`), h("td", { class: "num" }, r.rung), h("td", { class: "num" }, r.n),
        h("td", { class: "num" }, r.r), h("td", { class: "num" }, r.steps ?? "–"), h("td", { class: "num" }, duration(r.wall_s)),
        h("td", {}, r.packs.map((p, i) => h("span", { class: "pack" }, `pack ${i + 1}: ${p.join(", ")}`)))))))));
  lineChart(chart.querySelector(".plot"), series, { xLabel: "resource r (units of training)", yLabel: "validation loss",
                                                    title: "trial curves", legend: series.length <= 12, logY: true });
}

// -- routing ------------------------------------------------------------------------------
async function route() {
  stopPage();
  stopPage = () => {};
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, ...rest] = hash.split("/");
  const signedIn = Boolean(sessionStorage.getItem(TOKEN_KEY));
  if (!signedIn || page === "signin") {
    document.getElementById("nav").hidden = true;
    signInPage();
    return;
  }
  document.getElementById("nav").hidden = false;
  try {
    if (!document.getElementById("who").textContent) {
      document.getElementById("who").textContent = `signed in as ${(await api("GET", "/me")).name}`;
    }
    if (page === "submit") await submitPage();
    else if (page === "runs") await runsPage();
    else if (page === "studies" && rest.length) await studyPage(Number(rest[0]));
    else if (page === "studies") await studiesPage();
    else if (page === "simulations" && rest.length) await simulationPage(Number(rest[0]));
    else if (page === "simulations") await simulationsPage();
    else if (page === "compare") await comparePage(rest.join("/").split(",").map(decodeURIComponent).filter(Boolean));
    else if (page === "jobs" && rest.length) await runPage(decodeURIComponent(rest.join("/")));
    else await queuePage();
    main.focus({ preventScroll: true });
  } catch (exc) {
    if (exc.status !== 401) main.replaceChildren(h("h1", {}, "Something went wrong"), h("p", { class: "error", role: "alert" }, exc.message));
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  document.getElementById("who").textContent = "";
  signOut();
});
window.addEventListener("hashchange", route);
route();
