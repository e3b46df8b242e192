// rllm view: the page. No framework, no CDN: plain DOM, SVG charts. All state lives in the URL fragment
// (#/run/<id>?step=3&split=train&correct=1, #/run/<id>/episode/<line>, #/compare?...), so a link reopens the view.
"use strict";

const app = document.getElementById("app");
const crumbs = document.getElementById("crumbs");
const tip = document.getElementById("tip");
const COLORS = ["#2f6fde", "#e07b00", "#2d9a4b", "#c0392b", "#8b5cf6", "#0e9aa7", "#a16207", "#db2777"];

// ---- helpers --------------------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}
function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) if (k.startsWith("on")) el.addEventListener(k.slice(2), v); else el.setAttribute(k, v);
  for (const c of children.flat()) if (c) el.append(c);
  return el;
}
async function api(path) {
  const res = await fetch("/api/" + path);
  const data = await res.json();
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}
function route() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || "") };
}
function link(parts, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== null && v !== undefined) q.set(k, v);
  const s = q.toString();
  return "#/" + parts.map(encodeURIComponent).join("/") + (s ? "?" + s : "");
}
function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  return Math.abs(x) >= 1000 || (Math.abs(x) > 0 && Math.abs(x) < 1e-3) ? x.toExponential(2) : x.toFixed(digits);
}
function pill(ok, yes = "correct", no = "wrong") {
  return h("span", { class: "pill " + (ok ? "ok" : "no") }, ok ? yes : no);
}
function setCrumbs(...items) {
  fill(crumbs, ...items.flatMap((x, i) => (i ? [" / ", x] : [x])));
}
function fail(err) {
  fill(app, h("p", { class: "error" }, String(err.message || err)));
}

// ---- runs -----------------------------------------------------------------------------------------------------

async function showRuns() {
  setCrumbs();
  const { runs } = await api("runs");
  fill(app,
    h("h1", {}, "Runs"),
    runs.length ? h("table", { "data-testid": "runs" },
      h("tr", {}, ["run", "kind", "status", "model", "task", "estimator", "success rate", "steps", "episodes"].map((c) => h("th", {}, c))),
      runs.map((r) => h("tr", { "data-run": r.id },
        h("td", {}, h("a", { href: link(["run", r.id]) }, r.id)), h("td", { "data-testid": "kind" }, r.kind_label),
        h("td", {}, h("span", { class: "pill " + (r.status === "running" ? "running" : "") }, r.status)),
        h("td", {}, r.model || "—"), h("td", {}, r.task || "—"), h("td", { "data-testid": "estimator" }, r.estimator || "—"),
        h("td", { "data-testid": "success" }, successText(r.success)),
        h("td", {}, r.steps), h("td", {}, r.episodes)))) : h("p", { class: "muted" }, "No runs."),
    h("p", { class: "muted" }, "Compare one task across runs or checkpoints: open an episode and follow “compare”."));
}
// An eval run's success rate, or a training run's last validation one (with its step).
function successText(success) {
  if (!success) return "—";
  return Number(success.value).toFixed(3) + (success.source === "eval" ? " (eval)" : ` (validation, step ${success.step})`);
}

// ---- one run: curves and the episode table ------------------------------------------------------------------

// The curves each kind of run has: RL's rewards, KL and mismatch; SFT's and DPO's losses. Validation (`val/`, the
// task's episodes sampled before, during and after training) is every training kind's.
const VALIDATION = [
  ["validation success rate", (k) => k === "val/success_rate"],
  ["validation reward", (k) => k === "val/reward_mean"],
];
const SKIPPED = ["skipped updates", (k) => k === "skipped_nonfinite"];
const KIND_CHARTS = {
  sft: [["loss", (k) => k === "loss"], ...VALIDATION, ["grad norm", (k) => k === "grad_norm"], ["entropy", (k) => k === "entropy"], SKIPPED],
  dpo: [["loss", (k) => k === "loss"], ["preference accuracy", (k) => k === "rewards/accuracies"],
    ["implicit rewards", (k) => ["rewards/chosen", "rewards/rejected", "rewards/margins"].includes(k)], ...VALIDATION,
    ["grad norm", (k) => k === "grad_norm"], SKIPPED],
};
const CHARTS = [
  ["reward", (k) => /^(val\/)?reward_mean$/.test(k) || /^(val\/)?role\/[^/]+\/reward_mean$/.test(k)],
  ["success rate", (k) => /^(val\/)?success_rate$/.test(k)],
  ["response length", (k) => /^(val\/)?response_length_mean$/.test(k)],
  ["KL", (k) => k === "approx_kl" || k === "kl" || k === "kl_loss" || k === "mismatch/kl_k3"],
  ["mismatch", (k) => k === "mismatch/abs_diff_mean" || k === "token_mismatch" || k === "batch/rows_split" || k === "val/token_mismatch"],
  ["skipped updates", (k) => k === "skipped_update" || k === "skipped_nonfinite"],
];

async function showRun(runId, params) {
  const base = "run/" + encodeURIComponent(runId);
  const [info, metrics, health] = await Promise.all([api(base), api(base + "/metrics"), api(base + "/health")]);
  const s = info.summary;
  setCrumbs(h("a", { href: link(["run", runId]) }, runId));
  const head = h("div", {},
    h("h1", {}, runId),
    h("div", { class: "muted", "data-testid": "run-head" }, `${s.kind_label} · ${s.status} · model ${s.model || "?"} · task ${s.task || "?"}` +
      (s.estimator ? ` · estimator ${s.estimator}` : "") + ` · ${s.steps} steps · ${s.episodes} episodes · ${s.path}`),
    s.success ? h("div", { class: "card", "data-testid": "run-success" }, `success rate ${successText(s.success)}`,
      s.eval_summary ? ` · mean reward ${fmt(s.eval_summary.reward_mean)} · ${fmt(s.eval_summary.episodes)} episodes` : null) : null,
    info.config ? h("details", {}, h("summary", {}, "config.yaml"), h("pre", { class: "config" }, info.config)) : null);
  const charts = h("div", { class: "charts", "data-testid": "charts" });
  const marks = health.alarms.map((a) => ({ step: a.steps[0], name: a.name }));  // where each alarm started
  const series = metrics.series;
  // per-role series only for multi-agent runs (one role's series is the run's own); validation drawn first, so a
  // training point on the same spot is the one on top
  const roles = new Set(Object.keys(series).map((k) => (k.match(/^role\/([^/]+)\//) || [])[1]).filter(Boolean));
  const shown = (k) => roles.size > 1 || !/(^|\/)role\//.test(k);
  const order = (a, b) => (b.startsWith("val/") - a.startsWith("val/")) || a.localeCompare(b);
  const splits = Object.keys(info.facets.steps);  // a point links to its episodes where the run logged them
  for (const [title, match] of KIND_CHARTS[s.kind] || CHARTS) {
    const keys = Object.keys(series).filter((k) => match(k) && shown(k)).sort(order);
    if (keys.length) charts.append(chart(title, keys.map((k) => [k, series[k]]), runId, splits, marks));
  }
  const extra = h("select", { onchange: (e) => { if (e.target.value) charts.append(chart(e.target.value, [[e.target.value, series[e.target.value]]], runId, splits, marks)); } },
    h("option", { value: "" }, "add a chart…"), Object.keys(series).sort().map((k) => h("option", { value: k }, k)));
  const problems = metrics.problems.length ? h("p", { class: "error" }, metrics.problems.join("; ")) : null;
  const table = h("div", {});
  fill(app, head, problems, healthPanel(runId, health), exactnessView(info.exactness), Object.keys(series).length ? h("div", {}, h("h2", {}, "Curves ", extra), charts) : null,
    h("h2", {}, "Episodes"), table);
  await episodeTable(table, runId, info.facets, params);
}

// The run's alarms (rllm audit): each with its steps (a link to their episodes) and the episodes that show it.
function healthPanel(runId, health) {
  if (health.problems.length) return h("div", { class: "card", "data-testid": "health" }, h("h2", {}, "Health"), h("p", { class: "error" }, health.problems.join("; ")));
  if (health.ok) return h("div", { class: "card", "data-testid": "health" }, h("h2", {}, "Health"), h("span", { class: "pill ok" }, "no alarms"));
  const item = (a) => h("li", { "data-alarm": a.name },
    h("b", {}, a.name), " at ",
    h("a", { href: link(["run", runId], { split: "train", step: a.steps[0] }) }, a.steps.length > 1 ? `steps ${a.steps[0]}-${a.steps[a.steps.length - 1]}` : `step ${a.steps[0]}`),
    ": " + a.message,
    a.episodes.length ? h("div", { class: "muted" }, "episodes: ", a.episodes.map((e) => e.line
      ? h("a", { href: link(["run", runId, "episode", String(e.line)]), "data-line": e.line }, `${e.episode_id} `)
      : h("span", {}, `${e.episode_id} `))) : null);
  return h("div", { class: "card alarms", "data-testid": "health" }, h("h2", {}, `Health: ${health.alarms.length} alarm${health.alarms.length > 1 ? "s" : ""}`), h("ul", {}, health.alarms.map(item)));
}

// The run's exactness.json (rllm.exactness): its problems (what `rllm audit` fails on), the totals, the per-step series.
const EXACTNESS_ORDER = ["steps", "turns", "prefix_breaks", "template_breaks", "history_breaks", "round_trip_failures",
  "tool_format_failures", "retokenized", "outputs_without_ids", "rows_split", "logprob_abs_diff_mean",
  "logprob_abs_diff_max", "logprob_frac_beyond", "logprob_tokens", "logprob_steps"];
function exactnessView(report) {
  if (!report) return null;
  const totals = report.totals || {};
  const keys = [...EXACTNESS_ORDER.filter((k) => k in totals), ...Object.keys(totals).filter((k) => !EXACTNESS_ORDER.includes(k))];
  const problems = report.problems || [];
  const steps = report.steps || [];
  const columns = [...new Set(steps.flatMap((step) => Object.keys(step)))];
  return h("div", { class: "card", "data-testid": "exactness" },
    h("h2", {}, "Token exactness"),
    problems.length ? h("ul", { class: "error", "data-testid": "exactness-problems" }, problems.map((p) => h("li", {}, p)))
      : h("p", { class: "muted", "data-testid": "exactness-problems" }, "no problems"),
    h("table", { class: "exactness" }, h("tr", {}, keys.map((k) => h("th", {}, k.replaceAll("_", " ")))),
      h("tr", {}, keys.map((k) => h("td", {}, fmt(totals[k], 4))))),
    steps.length ? h("details", {}, h("summary", {}, `per step (${steps.length})`),
      h("table", {}, h("tr", {}, columns.map((k) => h("th", {}, k.replaceAll("_", " ")))),
        steps.map((step) => h("tr", {}, columns.map((k) => h("td", {}, fmt(step[k], 4))))))) : null);
}

function chart(title, entries, runId, splits, marks = []) {
  const W = 330, H = 170, L = 44, R = 8, T = 8, B = 20;
  const points = entries.flatMap(([, pts]) => pts.filter((p) => p[1] !== null));
  const box = h("div", { class: "chart", "data-chart": title });
  if (!points.length) return box;
  let [x0, x1] = [Math.min(...points.map((p) => p[0])), Math.max(...points.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...points.map((p) => p[1])), Math.max(...points.map((p) => p[1]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" },
    svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#ccd" }),
    svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#ccd" }),
    svgText(2, T + 8, fmt(y1)), svgText(2, H - B, fmt(y0)), svgText(L, H - 4, "step " + x0), svgText(W - 50, H - 4, "step " + x1));
  for (const mark of marks.filter((m) => m.step >= x0 && m.step <= x1)) {  // an alarm's first step: a red rule
    const rule = svg("line", { x1: X(mark.step), y1: T, x2: X(mark.step), y2: H - B, stroke: "#dc2626", "stroke-dasharray": "3 2", "data-alarm": mark.name });
    rule.append(svg("title", {}, document.createTextNode(`alarm ${mark.name} from step ${mark.step}`)));
    g.append(rule);
  }
  entries.forEach(([key, pts], i) => {
    const color = COLORS[i % COLORS.length];
    const ok = pts.filter((p) => p[1] !== null);
    g.append(svg("polyline", { points: ok.map((p) => `${X(p[0])},${Y(p[1])}`).join(" "), fill: "none", stroke: color, "stroke-width": 1.6 }));
    const split = key.startsWith("val/") ? "val" : "train";
    const linked = splits.includes(split);
    for (const [step, value] of ok) {
      const dot = svg("circle", { cx: X(step), cy: Y(value), r: 3.2, fill: color, "data-step": step, "data-key": key,
        onclick: linked ? () => { location.hash = link(["run", runId], { split, step }); } : null });
      dot.append(svg("title", {}, document.createTextNode(`${key} at step ${step}: ${fmt(value, 4)}` + (linked ? " (click: its episodes)" : ""))));
      g.append(dot);
    }
  });
  box.append(h("h3", {}, title), g, h("div", { class: "legend" }, entries.map(([k], i) => h("span", {}, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), k))));
  return box;
}
function svgText(x, y, text) {
  const t = svg("text", { x, y, "font-size": 9, fill: "#6b7280" });
  t.textContent = text;
  return t;
}

const FILTERS = ["split", "step", "correct", "termination", "task", "role", "reward_min", "reward_max", "q", "errors"];

async function episodeTable(container, runId, facets, params) {
  const query = {};
  for (const k of [...FILTERS, "sort", "page"]) if (params.get(k)) query[k] = params.get(k);
  const go = (changes) => {
    const next = { ...query, ...changes };
    if (!("page" in changes)) delete next.page;
    location.hash = link(["run", runId], next);
  };
  const input = (name, label, attrs = {}) => h("label", {}, label, h("input", { name, value: query[name] || "", ...attrs,
    onchange: (e) => go({ [name]: e.target.value }) }));
  const select = (name, label, options) => h("label", {}, label, h("select", { name, onchange: (e) => go({ [name]: e.target.value }) },
    h("option", { value: "" }, "any"), options.map(([v, text]) => h("option", { value: v, selected: String(query[name] || "") === String(v) }, text))));
  const steps = query.split ? facets.steps[query.split] || [] : [...new Set(Object.values(facets.steps).flat())].sort((a, b) => a - b);
  const filters = h("div", { class: "filters", "data-testid": "filters" },
    select("split", "split", Object.keys(facets.steps).map((s) => [s, s])),
    select("step", "step", steps.map((s) => [s, s])),
    select("correct", "correct", [["1", "correct"], ["0", "wrong"]]),
    select("termination", "termination", facets.terminations.map((t) => [t, t])),
    select("role", "role", facets.roles.map((r) => [r, r])),
    input("task", "task id contains"),
    input("reward_min", "reward ≥", { size: 5 }), input("reward_max", "reward ≤", { size: 5 }),
    input("q", "search text", { type: "search" }),
    facets.errors ? select("errors", `corrupt lines (${facets.errors})`, [["1", "only those"]]) : null,
    h("a", { href: link(["run", runId]) }, "clear"));
  fill(container, filters, h("p", { class: "muted" }, "Loading…"));
  let page;
  try {
    page = await api(`run/${encodeURIComponent(runId)}/episodes?` + new URLSearchParams(query).toString());
  } catch (err) {
    fill(container, filters, h("p", { class: "error" }, String(err.message)));
    return;
  }
  const sort = query.sort || "line";
  const th = (col, label) => h("th", { class: "sortable" + (sort.replace("-", "") === col ? " sorted" + (sort.startsWith("-") ? "" : " asc") : ""),
    onclick: () => go({ sort: sort === col ? "-" + col : col }) }, label);
  const pages = Math.max(1, Math.ceil(page.total / page.per_page));
  const rows = page.rows.map((r) => r.error
    ? h("tr", { class: "corrupt", "data-line": r.line }, h("td", {}, r.line), h("td", { colspan: 9 }, `line ${r.line}: ${r.error}`))
    : h("tr", { class: "clickable", "data-line": r.line, onclick: () => { location.hash = link(["run", runId, "episode", String(r.line)]); } },
      h("td", {}, r.line), h("td", {}, r.split), h("td", {}, r.step), h("td", {}, r.task_id), h("td", {}, r.episode_id),
      h("td", {}, fmt(r.reward)), h("td", {}, pill(r.correct)), h("td", {}, r.termination), h("td", {}, r.roles.join(", ")),
      h("td", {}, `${r.turns} / ${r.tokens}` + (r.mismatch ? ` · ${r.mismatch} mismatch` : ""))));
  fill(container, filters,
    h("div", { class: "pager" }, h("span", { "data-testid": "total" }, `${page.total} episodes`),
      page.pending ? h("span", { class: "pill running" }, "last line being written") : null,
      h("button", { disabled: page.page <= 1, onclick: () => go({ page: page.page - 1 }) }, "‹ prev"),
      h("span", {}, `page ${page.page} of ${pages}`),
      h("button", { disabled: page.page >= pages, onclick: () => go({ page: page.page + 1 }) }, "next ›")),
    h("table", { "data-testid": "episodes" },
      h("tr", {}, th("line", "#"), th("split", "split"), th("step", "step"), th("task_id", "task"), th("episode_id", "episode"),
        th("reward", "reward"), th("correct", "correct"), th("termination", "termination"), h("th", {}, "roles"), th("tokens", "turns / tokens")),
      rows));
}

// ---- one episode: conversation and token overlay -----------------------------------------------------------

async function showEpisode(runId, line, params) {
  const ep = await api(`run/${encodeURIComponent(runId)}/episode/${line}`);
  const e = ep.episode;
  setCrumbs(h("a", { href: link(["run", runId]) }, runId),
    h("a", { href: link(["run", runId], { split: ep.split, step: ep.step }) }, `${ep.split} step ${ep.step}`), `line ${line}`);
  const tab = params.get("view") || "conversation";
  const views = h("div", {});
  fill(app,
    h("h1", {}, e.id || `line ${line}`),
    h("div", { class: "muted" }, `${ep.split} · step ${ep.step} · `, pill(e.is_correct), ` · termination ${e.termination_reason || "none"}`),
    h("p", {}, h("a", { href: link(["compare"], { a: runId, sa: `${ep.split}:${ep.step}`, b: runId, key: ep.task_key }), "data-testid": "compare-link" },
      "compare this task across checkpoints or runs")),
    h("details", {}, h("summary", {}, "task"), h("pre", { class: "config" }, JSON.stringify(e.task, null, 2))),
    h("div", { class: "tabs" }, ["conversation", "tokens"].map((v) => h("button", { class: v === tab ? "on" : "", "data-tab": v,
      onclick: () => { location.hash = link(["run", runId, "episode", String(line)], { view: v }); } }, v === "tokens" ? "token overlay" : v))),
    views);
  ep.trajectories.forEach((t, i) => {
    views.append(h("h2", {}, `trajectory ${i}: ${t.name} · reward ${fmt(t.reward)} `, pill(t.is_correct)),
      tab === "tokens" ? overlayView(t.overlay) : conversationView(t.turns));
  });
}

function message(role, content, extra) {
  return h("div", { class: "msg " + role }, h("span", { class: "role" }, role + (extra ? " · " + extra : "")), contentView(content));
}

// A message's content: text as it is; OpenAI content parts as their text and images (a thumbnail that opens the
// full image); anything else as JSON.
function contentView(content) {
  if (content === null || content === undefined || typeof content !== "object") return content ?? "";
  const parts = Array.isArray(content) ? content : [content];
  if (!parts.every((p) => p && typeof p === "object" && (p.type === "text" || p.type === "image_url"))) {
    return JSON.stringify(content, null, 1);
  }
  return parts.map((p) => (p.type === "text" ? p.text : imageView(typeof p.image_url === "string" ? p.image_url : p.image_url.url)));
}
// The server sends only the run's own image URLs and raster data: URLs (rllm.viewer.episode.shown_images); this
// check keeps any other URL (javascript:, data:text/html) out of href/src should one ever slip through.
const SHOWN_IMAGE = /^(\/api\/run\/[^/]+\/images\/[0-9a-f]{64}\.(png|jpeg|webp|gif)$|data:image\/(png|jpeg|jpg|gif|webp|bmp|avif)[;,])/i;
function imageView(url) {
  if (typeof url !== "string" || !SHOWN_IMAGE.test(url)) return h("span", { class: "error" }, "[image not shown]");
  return h("a", { href: url, target: "_blank", rel: "noopener", class: "image" }, h("img", { class: "thumb", src: url, alt: "image", loading: "lazy" }));
}

function conversationView(turns) {
  return h("div", { "data-testid": "conversation" }, turns.map((turn, i) => h("div", {},
    turn.history_rewritten ? h("div", { class: "rowsplit" }, `step ${i}: the agent rewrote the history (shown whole)`) : null,
    turn.messages.map((m) => message(m.role, m.content, m.tool_calls ? "tool calls: " + JSON.stringify(m.tool_calls) : null)),
    turn.reply ? [
      turn.reply.reasoning ? message("assistant", turn.reply.reasoning, "reasoning") : null,
      message("assistant", turn.reply.content, `step ${i} · ${turn.reply.tokens} tokens · weights v${turn.reply.weight_version} · ${turn.reply.finish_reason || ""}`),
      turn.reply.tool_calls.map((c) => message("tool", `${c.name}(${typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments)})`, "call")),
    ] : null,
    observationView(turn.observation, turn.observation_in_prompt),
    h("div", { class: "stepmeta" }, `step ${i}: reward ${fmt(turn.reward)} · done ${turn.done}` +
      (Object.keys(turn.info || {}).length ? " · " + JSON.stringify(turn.info) : "")))));
}

// What the env returned after a step, as what it is: text; image parts; a chat list (SWE's tool results) as its
// messages; a dict (the web env's goal, accessibility tree, url) as its fields, long ones folded. When the next
// prompt shows it in the agent's own words (the truth: what the model read), the raw value is folded away.
function observationView(obs, inPrompt) {
  if (obs === null || obs === undefined || obs === "" || (Array.isArray(obs) && !obs.length)) return null;
  const body = isChat(obs) ? obs.map((m) => message(m.role, m.content, "observation" + (m.name ? " · " + m.name : "")))
    : obs && typeof obs === "object" && !Array.isArray(obs) && !isPart(obs) ? h("div", { class: "msg observation", "data-testid": "observation-fields" },
      h("span", { class: "role" }, "observation"), Object.entries(obs).map(([k, v]) => fieldView(k, v)))
    : message("observation", obs);
  if (!inPrompt) return h("div", { "data-testid": "observation" }, body);
  return h("details", { class: "rawobs", "data-testid": "raw-observation" },
    h("summary", {}, "observation as the env returned it (the model read it as the next prompt's message, below)"), body);
}
function isPart(value) {  // an OpenAI content part: text or an image, shown by contentView
  return value.type === "text" || value.type === "image_url";
}
function isChat(value) {
  return Array.isArray(value) && value.every((m) => m && typeof m === "object" && !Array.isArray(m) && "role" in m);
}
function fieldView(key, value) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 1);
  const lines = text.split("\n").length;
  if (text.length <= 160 && lines <= 2) return h("div", { class: "field" }, h("b", {}, key + ": "), text);
  return h("details", { class: "field", "data-field": key },
    h("summary", {}, `${key} (${lines} line${lines === 1 ? "" : "s"}, ${text.length} characters)`), h("pre", {}, text));
}

const TOKEN_CLASSES = { positive: "tok trn", negative: "tok trn neg", zero: "tok zero", unknown: "tok unk", sampled: "tok smp", context: "tok ctx" };
const NOT_TRAINED = {
  val: "not trained: a validation episode (sampled to measure the policy, never in an update)",
  eval: "not trained: an eval episode",
};

function overlayView(ov) {
  const box = h("div", { "data-testid": "overlay" });
  if (ov.error) return h("p", { class: "error" }, ov.error);
  const trained = ov.rows.reduce((n, r) => n + r.trained_tokens, 0);
  const count = (state) => ov.rows.reduce((n, r) => n + r.state.filter((x) => x === state).length, 0);
  const zero = count("zero"), unknown = count("unknown");
  const training = ov.split === "train";
  const notTrained = !training ? NOT_TRAINED[ov.split] || `not trained: a ${ov.split} episode`
    : ov.in_update === false ? "not trained: this trajectory was left out of its step's update (excluded or filtered)" : null;
  box.append(h("div", { class: "keys" },
    h("span", { "data-testid": "trained-count" }, `${trained} trained tokens` + (zero ? `, ${zero} of them with advantage 0 (no gradient)` : "")),
    h("span", {}, `${ov.rows.length} row${ov.rows.length === 1 ? "" : "s"}`),
    notTrained ? h("span", { "data-testid": "not-trained" }, notTrained) : null),
    h("div", { class: "keys", "data-testid": "legend" },
      training ? [h("span", { class: "tok trn" }, "trained (advantage > 0)"), h("span", { class: "tok trn neg" }, "trained (advantage < 0)"),
        h("span", { class: "tok zero" }, "advantage 0: no gradient")] : null,
      unknown ? h("span", { class: "tok unk" }, "loss mask 1, advantage not recorded (trained or not: unknown)") : null,
      h("span", { class: "tok smp" }, "sampled, not trained"), h("span", { class: "tok ctx" }, "context"),
      h("span", { "data-testid": "advantages" }, ov.advantages === "recorded" ? "advantages as recorded by the trainer"
        : ov.advantages === "recomputed" ? "advantages recomputed from the step's episodes (a run from before they were recorded)"
        : training ? "no advantages: its estimator needs what the run did not log, or it was not in the update" : "no advantages: not a training episode"),
      ov.note ? h("span", {}, ov.note) : null));
  ov.rows.forEach((row, r) => {
    if (row.split_before) box.append(h("div", { class: "rowsplit", "data-testid": "row-split" },
      `row ${r + 1} starts at step ${row.steps[0]}: its prompt does not extend the row before (token mismatch: the history was re-rendered differently), so it is trained as a separate sequence`));
    if (row.truncated || row.masked) box.append(h("div", { class: "rowsplit" },
      row.masked ? "this row is over the length limits: its loss mask is zero" : "this row was truncated at the length limit"));
    const pre = h("div", { class: "overlay", "data-row": r });
    const spans = row.ids.map((id, t) => h("span", { class: TOKEN_CLASSES[row.state[t]], "data-t": t }, row.text ? row.text[t] : `⟨${id}⟩`));
    pre.append(...spans);
    pre.addEventListener("mousemove", (ev) => {
      const t = ev.target.dataset && ev.target.dataset.t;
      if (t === undefined) { tip.hidden = true; return; }
      const i = Number(t), s = row.step[i];
      const k = s >= 0 ? row.steps.indexOf(s) : -1;
      tip.textContent = [`token ${i}  id ${row.ids[i]}  ${JSON.stringify(row.text ? row.text[i] : "")}`,
        tokenText(row.state[i], row.mask[i], ov, i < row.prompt_length),
        s >= 0 ? `step ${s}  weight version ${k >= 0 ? row.weight_versions[k] : "?"}` : null,
        row.logprob[i] !== null ? `sampler log-prob ${fmt(row.logprob[i], 4)}` : null,
        row.trainer_logprob && row.trainer_logprob[i] !== null ? `trainer log-prob ${fmt(row.trainer_logprob[i], 4)}` : null,
        row.mask[i] && training ? `advantage ${adv_text(row.advantage[i])}` : null].filter(Boolean).join("\n");
      tip.hidden = false;
      tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 440) + "px";
      tip.style.top = ev.clientY + 16 + "px";
    });
    pre.addEventListener("mouseleave", () => { tip.hidden = true; });
    box.append(h("div", { class: "keys" }, `row ${r + 1}: ${row.ids.length} tokens, ${row.trained_tokens} trained, steps ${row.steps.join(", ")}`), pre);
  });
  return box;
}
function tokenText(state, mask, ov, inPrompt) {
  if (state === "positive" || state === "negative") return "trained (loss mask 1)";
  if (state === "zero") return "trained (loss mask 1), advantage 0: no gradient";
  if (state === "unknown") return "loss mask 1; advantage not recorded, so whether the update used it is unknown";
  if (state === "sampled") return !mask ? "sampled, not trained (masked)" : ov.split !== "train"
    ? `sampled, not trained (${ov.split === "val" ? "a validation" : "an " + ov.split} episode)` : "sampled, not trained (not in the update)";
  return inPrompt ? "prompt (context)" : "observation / template (context)";
}
function adv_text(a) {
  return a === null || a === undefined ? "not recorded" : fmt(a, 4);
}

// ---- compare: one task at two checkpoints or in two runs ------------------------------------------------------

// Episodes are paired by the task's content (`key`: a hash of the dataset row without its id keys), never by task
// id: ids are positions or per-seed numbers, so "arith-3" can be "7 * 9" in one run and "886 * 8" in another. Each
// side offers only the (split, step) pairs where that task appears; `sa`/`sb` pick one ("val:2", or a bare step
// with `split`, as older links have it). `task` (a task id of run a) is resolved to its content once.
async function showCompare(params) {
  setCrumbs("compare");
  const { runs } = await api("runs");
  const state = Object.fromEntries(params.entries());
  const go = (changes) => { location.hash = link(["compare"], { ...state, ...changes }); };
  const runA = params.get("a") || (runs[0] && runs[0].id);
  const taskId = params.get("task") || "";
  const split = params.get("split") || "";
  const head = h("div", {});
  const sides = h("div", { class: "cols" });
  fill(app, h("h1", {}, "Compare"), head, sides);
  const idInput = h("input", { value: taskId, name: "task", onchange: (e) => go({ task: e.target.value, key: "" }) });
  head.append(h("div", { class: "filters" }, h("label", {}, "task id in run a", idInput)));
  let key = params.get("key") || "";
  if (!key && taskId && runA) {
    const found = await api(`run/${encodeURIComponent(runA)}/episodes?` + new URLSearchParams({ task_id: taskId, per_page: 1, ...(split ? { split } : {}) }));
    if (found.rows.length) key = found.rows[0].task_key;
    else head.append(h("p", { class: "error" }, `run ${runA} has no task with id ${taskId}`));
  }
  if (!key) {
    head.append(h("p", { class: "muted" }, "Pick a task: open an episode and follow “compare”, or type a task id of run a."));
    return;
  }
  head.append(h("p", { class: "muted" }, "Paired by the task's content (its dataset row without the id), not by task id: " +
    "the same id can name another question in another run." + (key.startsWith("id:") ? " These episodes recorded no task: paired by task id." : "")));
  const task = h("details", {}, h("summary", {}, "task"));
  head.append(task);
  for (const side of ["a", "b"]) {
    const runId = params.get(side) || runA;
    const col = h("div", { "data-side": side });
    sides.append(col);
    if (!runId) continue;
    const runSelect = h("label", {}, "run", h("select", { onchange: (e) => go({ [side]: e.target.value, ["s" + side]: "", ["e" + side]: "" }) },
      runs.map((r) => h("option", { value: r.id, selected: r.id === runId }, r.id))));
    const found = await api(`run/${encodeURIComponent(runId)}/episodes?` + new URLSearchParams({ task_key: key, per_page: 1 }));
    const where = found.where;
    if (!where.length) {
      col.append(h("div", { class: "filters" }, runSelect), h("div", { class: "card", "data-testid": "compare-summary" },
        `${runId}: no episode of this task (no task with the same content; task ids are not compared)`));
      continue;
    }
    const wanted = params.get("s" + side) || "";
    const spot = (w) => `${w.split}:${w.step}`;
    const asked = wanted.includes(":") ? wanted : wanted !== "" && split ? `${split}:${wanted}` : "";
    const place = where.find((w) => spot(w) === asked) || (side === "a" ? where[0] : where[where.length - 1]);
    col.append(h("div", { class: "filters" }, runSelect,
      h("label", {}, "step", h("select", { name: "s" + side, onchange: (e) => go({ ["s" + side]: e.target.value, ["e" + side]: "" }) },
        where.map((w) => h("option", { value: spot(w), selected: spot(w) === spot(place) }, `${w.split} · step ${w.step} (${w.episodes})`))))));
    const page = await api(`run/${encodeURIComponent(runId)}/episodes?` + new URLSearchParams({ task_key: key, split: place.split, step: place.step, per_page: 100 }));
    const ok = page.rows.filter((r) => r.correct).length;
    const ids = [...new Set(page.rows.map((r) => r.task_id))].join(", ");
    if (side === "a" && !idInput.value) idInput.value = ids;
    col.append(h("div", { class: "card", "data-testid": "compare-summary" },
      `${runId} · ${place.split} step ${place.step}: ${page.total} episodes of this task, ${ok} correct, mean reward ` +
      fmt(page.rows.reduce((n, r) => n + (r.reward || 0), 0) / Math.max(1, page.rows.length)) + ` · task id here: ${ids}`));
    const pick = params.get("e" + side) || (page.rows[0] && String(page.rows[0].line));
    col.append(h("table", {}, page.rows.map((r) => h("tr", { class: "clickable", onclick: () => go({ ["e" + side]: r.line }) },
      h("td", {}, String(r.line) === pick ? "▶" : ""), h("td", {}, r.episode_id), h("td", {}, fmt(r.reward)), h("td", {}, pill(r.correct))))));
    if (pick) {
      const ep = await api(`run/${encodeURIComponent(runId)}/episode/${pick}`);
      if (task.childNodes.length === 1) task.append(h("pre", { class: "config" }, JSON.stringify(ep.episode.task, null, 2)));
      ep.trajectories.forEach((t) => col.append(h("h2", {}, `${t.name} · reward ${fmt(t.reward)}`), conversationView(t.turns)));
    }
  }
}

// ---- routing --------------------------------------------------------------------------------------------------

async function render() {
  tip.hidden = true;
  const { parts, params } = route();
  try {
    if (parts[0] === "run" && parts[2] === "episode") await showEpisode(parts[1], parts[3], params);
    else if (parts[0] === "run" && parts[1]) await showRun(parts[1], params);
    else if (parts[0] === "compare") await showCompare(params);
    else await showRuns();
    document.body.dataset.ready = location.hash;  // tests wait for this
  } catch (err) {
    fail(err);
    document.body.dataset.ready = location.hash;
  }
}
window.addEventListener("hashchange", render);
render();
