"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const RUNS = DATA.runs, SAMPLES = DATA.samples, METRICS = DATA.metrics;
const KINDS = ["infrastructure_error", "state_mismatch", "model_error", "prediction_failed"];
const KEYS = ["sample", "q", "task", "traj", "error", "metric", "min", "max", "run", "sort"];
const DEFAULTS = { metric: "rouge_l", run: "any", sort: "order" };
let state = {};
let shown = [];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") node.setAttribute("style", value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
const text = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));
const fmt = (x) => (typeof x === "number" ? x.toFixed(3) : "–");
function colour(x) {
  if (typeof x !== "number") return "background:#eaeef2";
  const v = Math.max(0, Math.min(1, x));
  return `background:hsl(${Math.round(v * 120)}, 70%, ${88 - 6 * Math.abs(v - 0.5)}%)`;
}
function value(row, metric) {
  if (!row) return null;
  if (row.scores && metric in row.scores) return row.scores[metric];
  const v = row[metric];
  return typeof v === "number" ? v : null;
}
const tagOf = (i) => el("span", { class: "tag t" + (i % 6), title: RUNS[i].label }, RUNS[i].tag);

// -- state <-> URL fragment --------------------------------------------------------------------------
function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  state = {};
  for (const key of KEYS) state[key] = params.get(key) ?? DEFAULTS[key] ?? "";
}
function writeHash() {
  const params = new URLSearchParams();
  for (const key of KEYS) if (state[key] && state[key] !== (DEFAULTS[key] ?? "")) params.set(key, state[key]);
  const hash = "#" + params.toString();
  if (location.hash !== hash) history.replaceState(null, "", hash === "#" ? location.pathname : hash);
}

// -- filtering and sorting -------------------------------------------------------------------------
function runsLookedAt() {
  const i = parseInt(state.run, 10);
  return Number.isInteger(i) && i >= 0 && i < RUNS.length ? [i] : RUNS.map((_, j) => j);
}
function haystack(sample) {
  if (sample._hay === undefined) {
    const parts = [sample.id, sample.target];
    for (const row of sample.rows) {
      if (!row) continue;
      parts.push(row.prediction, ...KINDS.map((k) => (row[k] ? text(row[k]) : "")));
      for (const m of row.transcript || []) parts.push(m.content, JSON.stringify(m.tool_calls || []));
      parts.push(JSON.stringify(row.tool_calls || []));
    }
    sample._hay = parts.join("\n").toLowerCase();
  }
  return sample._hay;
}
function matches(sample) {
  if (state.task && sample.task !== state.task) return false;
  if (state.traj && sample.trajectory_id !== state.traj) return false;
  const runs = runsLookedAt().filter((i) => sample.rows[i]);
  if (state.error === "none" && !runs.every((i) => sample.kinds[i] === "none")) return false;
  if (state.error === "any" && !runs.some((i) => sample.kinds[i] !== "none")) return false;
  if (KINDS.includes(state.error) && !runs.some((i) => sample.kinds[i] === state.error)) return false;
  const lo = state.min === "" ? null : parseFloat(state.min), hi = state.max === "" ? null : parseFloat(state.max);
  if ((lo !== null && !isNaN(lo)) || (hi !== null && !isNaN(hi))) {
    const ok = runs.some((i) => {
      const v = value(sample.rows[i], state.metric);
      return v !== null && !(lo !== null && v < lo) && !(hi !== null && v > hi);
    });
    if (!ok) return false;
  }
  if (state.q && !haystack(sample).includes(state.q.toLowerCase())) return false;
  return true;
}
function sortKey(sample) {
  const [i] = runsLookedAt();
  if (state.sort.endsWith("diff")) {
    const a = value(sample.rows[0], state.metric), b = value(sample.rows[1], state.metric);
    return a === null || b === null ? null : a - b;
  }
  return value(sample.rows[i], state.metric);
}
function filtered() {
  const list = SAMPLES.filter(matches);
  if (state.sort !== "order") {
    const sign = state.sort.startsWith("-") ? -1 : 1;
    const keyed = list.map((s, n) => [sortKey(s), n, s]);
    keyed.sort((x, y) => (x[0] === null) - (y[0] === null) || sign * (x[0] - y[0]) || x[1] - y[1]);
    return keyed.map((k) => k[2]);
  }
  return list;
}

// -- rendering ---------------------------------------------------------------------------------------
function setupControls() {
  const fill = (id, options) => {
    const select = document.getElementById(id);
    select.replaceChildren(...options.map(([v, label]) => el("option", { value: v }, label)));
  };
  const tasks = [...new Set(SAMPLES.map((s) => s.task))].sort();
  const trajs = [...new Set(SAMPLES.map((s) => s.trajectory_id))].sort();
  fill("task", [["", "all tasks"], ...tasks.map((t) => [t, t])]);
  fill("traj", [["", `all trajectories (${trajs.length})`], ...trajs.map((t) => [t, t])]);
  fill("error", [["", "all"], ["any", "any error"], ...KINDS.map((k) => [k, k]), ["none", "none"]]);
  fill("metric", METRICS.map((m) => [m, m]));
  fill("run", [["any", "any run"], ...RUNS.map((r, i) => [String(i), `${r.tag}: ${r.label}`])]);
  const sorts = [["order", "dataset order"], ["score", "score ↑"], ["-score", "score ↓"]];
  if (RUNS.length > 1) {
    const diff = `${RUNS[0].tag} − ${RUNS[1].tag}`;
    sorts.push(["diff", diff + " ↑"], ["-diff", diff + " ↓"]);
  }
  fill("sort", sorts);
  for (const key of KEYS.slice(1)) {
    const input = document.getElementById(key);
    input.addEventListener(input.tagName === "SELECT" ? "change" : "input", () => {
      state[key] = input.value;
      writeHash();
      render();
    });
  }
  document.getElementById("legend").replaceChildren(
    ...RUNS.map((r, i) =>
      el("span", { title: r.path }, tagOf(i), r.label, el("span", { class: "meta" },
        ` · ${r.samples} samples, ${r.scored} scored` +
        KINDS.filter((k) => r.errors[k]).map((k) => `, ${r.errors[k]} ${k}`).join("")))
    )
  );
  document.getElementById("keys").replaceChildren(
    el("kbd", {}, "j"), " ", el("kbd", {}, "k"), " move · ", el("kbd", {}, "/"), " search");
}
function syncControls() {
  for (const key of KEYS.slice(1)) {
    const input = document.getElementById(key);
    if (input.tagName === "SELECT" && ![...input.options].some((o) => o.value === state[key])) {
      const option = el("option", { value: state[key] }, state[key] + " (not in these runs)");
      input.append(option);
    }
    if (document.activeElement !== input) input.value = state[key];
  }
}
function renderList() {
  const list = document.getElementById("list");
  const items = shown.map((s) =>
    el("li", { "data-sample": s.id, class: s.id === state.sample ? "selected" : null, onclick: () => select(s.id) },
      el("div", { class: "sid" }, s.id),
      el("div", { class: "chips" },
        s.rows.map((row, i) => el("span",
          { class: "chip", style: colour(value(row, state.metric)), title: `${RUNS[i].label}: ${state.metric}` },
          RUNS[i].tag + " " + (row ? fmt(value(row, state.metric)) : "absent"))),
        s.kinds.map((k, i) => (k && k !== "none" ? el("span", { class: "chip err" }, `${RUNS[i].tag} ${k}`) : null))
      )
    )
  );
  list.replaceChildren(...items);
  document.getElementById("count").textContent = `${shown.length} of ${SAMPLES.length} samples`;
  if (!shown.length) list.append(el("li", { class: "empty" }, "No sample matches these filters."));
}
function dl(pairs) {
  const kept = pairs.filter((p) => p[1] !== null && p[1] !== undefined && p[1] !== "");
  return el("dl", {}, kept.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}
function usageText(u) {
  if (!u) return null;
  const tokens = `${u.input_tokens} in / ${u.output_tokens} out tokens` +
    (u.tokens_reported === false ? " (some calls reported none)" : "");
  return `${u.model_calls} model calls, ${tokens}, ${u.tool_calls} tool calls`;
}
const TIMING = ["state", "tools", "model", "scoring"];
function timingNode(t) {
  // where a sample's time went: a stacked bar (each kind's share) and the seconds of each kind
  if (!t) return null;
  const parts = TIMING.map((k) => [k, typeof t[k] === "number" ? t[k] : 0]);
  const total = parts.reduce((sum, [, v]) => sum + v, 0);
  const bar = el("div", { class: "timing-bar", title: "state / tools / model / scoring" },
    parts.filter(([, v]) => v > 0).map(([k, v]) =>
      el("span", { class: `timing-${k}`, style: `width: ${(100 * v / (total || 1)).toFixed(1)}%`, title: `${k} ${v.toFixed(3)} s` })));
  return el("div", { class: "timing" }, bar,
    el("span", { class: "meta" }, parts.map(([k, v]) => `${k} ${v.toFixed(3)}`).join(" · ") + " s"));
}
function modelText(m) {
  if (!m) return null;
  const params = m.params && Object.keys(m.params).length ? " " + JSON.stringify(m.params) : "";
  return [m.provider, m.name].filter(Boolean).join("/") + params;
}
function toolCallList(calls) {
  if (!calls || !calls.length) return null;
  return el("ol", { class: "calls" }, calls.map((c) =>
    el("li", {}, el("code", {}, `${c.tool}(${c.args === undefined ? "" : JSON.stringify(c.args)})`),
      c.ok === false ? " ✗" : " ✓")));
}
function runCard(sample, i) {
  const row = sample.rows[i];
  const head = el("div", { class: "head" }, tagOf(i), RUNS[i].label);
  if (!row) return el("div", { class: "card", "data-run": i }, head, el("p", { class: "missing" }, "not in this run"));
  const kind = sample.kinds[i];
  const errors = KINDS.filter((k) => row[k]).map((k) =>
    el("div", { class: "error" }, el("span", { class: "chip err" }, k), el("pre", {}, text(row[k]))));
  const scores = el("div", { class: "scores" },
    METRICS.map((m) => (value(row, m) === null ? null :
      el("span", { class: "chip", style: colour(value(row, m)) }, `${m} ${fmt(value(row, m))}`))));
  const verdict = (d) => (d.passed === null || d.passed === undefined ? "" : d.passed ? " · passed" : " · failed");
  const draws = row.draws && row.draws.length
    ? el("details", {}, el("summary", {}, `${row.draws.length} predictions (draws)`),
      row.draws.map((d, n) => el("div", { class: "draw" },
        el("div", { class: "meta" }, `#${n + 1} · rouge_l ${fmt(d.scores && d.scores.rouge_l)}${verdict(d)}`),
        el("pre", {}, d.prediction ?? ""),
        Array.isArray(d.transcript) && d.transcript.length
          ? el("details", { class: "draw-transcript" },
            el("summary", {}, `transcript (${d.transcript.length} messages)`), messageNodes(d.transcript))
          : null)))
    : null;
  const unscored = ["infrastructure_error", "state_mismatch", "model_error"].includes(kind)
    ? el("div", { class: "meta" }, "not scored: left out of the summary, run again on resume") : null;
  return el("div", { class: "card", "data-run": i, "data-kind": kind }, head,
    kind === "none" ? null : errors, unscored,
    scores,
    el("pre", { class: "prediction" }, row.prediction ?? ""),
    dl([
      ["model", modelText(row.model)],
      ["agent", `${row.agent} (${row.observation})`],
      ["seconds", typeof row.seconds === "number" ? row.seconds.toFixed(2) : null],
      ["time went to", timingNode(row.timing)],
      ["usage", usageText(row.usage)],
      ["started", row.started_at], ["finished", row.finished_at],
      ["state check", row.state_check], ["recovered", row.recovered ? text(row.recovered) : null],
      ["forced", row.forced_submission ? "submission forced (step budget)" : null],
    ]),
    row.tool_calls && row.tool_calls.length
      ? el("div", { class: "meta" }, `env tool calls (${row.tool_calls.length})`) : null,
    toolCallList(row.tool_calls), draws);
}
function transcript(sample, i) {
  const row = sample.rows[i];
  const head = el("div", { class: "head" }, tagOf(i), RUNS[i].label);
  if (!row) return el("div", { class: "card", "data-run": i }, head, el("p", { class: "missing" }, "not in this run"));
  if (!Array.isArray(row.transcript)) {
    return el("div", { class: "card transcript", "data-run": i }, head,
      el("p", { class: "missing" }, "no transcript recorded" + (row.model ? "" : " (an agent without a model)")),
      row.tool_calls && row.tool_calls.length
        ? [el("div", { class: "meta" }, "the env's tool calls"), toolCallList(row.tool_calls)] : null);
  }
  return el("div", { class: "card transcript", "data-run": i }, head,
    el("div", { class: "meta" }, `${row.transcript.length} messages`), messageNodes(row.transcript));
}
function messageNodes(messages) {
  const names = {};
  for (const m of messages) for (const c of m.tool_calls || []) names[c.id] = c.name;
  return messages.map((m) => {
    const content = m.content ? el("pre", {}, text(m.content)) : null;
    const body = m.role === "system" && m.content && m.content.length > 400
      ? el("details", {}, el("summary", {}, `system prompt (${m.content.length} characters)`), content) : content;
    const usage = m.usage ? ` · ${m.usage.input_tokens ?? "?"} in / ${m.usage.output_tokens ?? "?"} out tokens` : "";
    return el("div", { class: "msg", "data-role": m.role },
      el("div", { class: "role" }, m.role,
        m.role === "tool"
          ? el("span", { class: "result" }, " ← ", el("span", { class: "name" }, names[m.tool_call_id] || "?"),
            el("span", { class: "meta" }, ` (${m.tool_call_id || "no id"})`))
          : null,
        usage ? el("span", { class: "result meta" }, usage) : null),
      body,
      (m.tool_calls || []).map((c) => el("div", { class: "call", "data-call-id": c.id || "" },
        "→ ", el("span", { class: "name" }, c.name ?? "?"), el("span", { class: "meta" }, ` (${c.id || "no id"})`),
        c.error
          ? el("div", { class: "error" }, el("span", { class: "chip err" }, "unparsable call"), " ", text(c.error))
          : null,
        el("pre", {}, text(c.args ?? "")))));
  });
}
function agreementLine(agreement) {
  // the step's replay against what the person saw: its cause and detail (text only)
  if (!agreement) return el("div", { class: "meta agreement" }, "replay agreement: not known (dataset not found)");
  const text = agreement.kind === "ok"
    ? "replay agreement: the replay shows what the person saw"
    : `replay agreement: ${agreement.kind}${agreement.detail ? ` · ${agreement.detail}` : ""}`;
  return el("div", { class: "meta agreement", "data-kind": agreement.kind }, text);
}
function figureList(figures) {
  // the step's figures (what the person saw as images; the model saw their text)
  if (!figures.length) return el("div", { class: "figures" });
  return el("div", { class: "figures" }, el("h3", {}, "figures of the step"),
    figures.map((f) => el("img", { class: "figure", alt: f.mime, src: `data:${f.mime};base64,${f.base64}` })));
}
function renderDetail() {
  const detail = document.getElementById("detail");
  const sample = SAMPLES.find((s) => s.id === state.sample);
  if (!sample) {
    detail.removeAttribute("data-sample");
    detail.replaceChildren(el("p", { class: "empty" }, "No sample selected."));
    return;
  }
  detail.setAttribute("data-sample", sample.id);
  const n = `--n:${RUNS.length}`;
  detail.replaceChildren(
    el("h2", {}, sample.id),
    el("div", { class: "meta" }, `trajectory ${sample.trajectory_id} · step ${sample.step} · task ${sample.task}`),
    agreementLine(sample.agreement),
    el("h3", {}, "target"), el("pre", { class: "target" }, sample.target),
    figureList(sample.figures || []),
    el("h3", {}, RUNS.length > 1 ? "predictions, side by side" : "prediction"),
    el("div", { class: "runs", style: n }, RUNS.map((_, i) => runCard(sample, i))),
    el("h3", {}, "transcripts"),
    el("div", { class: "runs", style: n }, RUNS.map((_, i) => transcript(sample, i)))
  );
  detail.scrollTop = 0;
}
function render() {
  shown = filtered();
  if (shown.length && !shown.some((s) => s.id === state.sample)) {
    state.sample = shown[0].id;  // the selection follows the filters
    writeHash();
  }
  syncControls();
  renderList();
  renderDetail();
  const selected = document.querySelector("#list li.selected");
  if (selected) selected.scrollIntoView({ block: "nearest" });
}
function select(id) {  // the list stays as it is: only the selection and the detail change
  state.sample = id;
  writeHash();
  for (const li of document.querySelectorAll("#list li")) li.classList.toggle("selected", li.dataset.sample === id);
  renderDetail();
  const selected = document.querySelector("#list li.selected");
  if (selected) selected.scrollIntoView({ block: "nearest" });
}
function move(step) {
  if (!shown.length) return;
  const at = shown.findIndex((s) => s.id === state.sample);
  const next = at < 0 ? 0 : Math.max(0, Math.min(shown.length - 1, at + step));
  select(shown[next].id);
}
document.addEventListener("keydown", (event) => {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
  if (event.key === "Escape" && typing) { document.activeElement.blur(); return; }
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === "j" || event.key === "ArrowDown") { move(1); event.preventDefault(); }
  else if (event.key === "k" || event.key === "ArrowUp") { move(-1); event.preventDefault(); }
  else if (event.key === "/") { document.getElementById("q").focus(); event.preventDefault(); }
});
window.addEventListener("hashchange", () => { readHash(); render(); });
readHash();
setupControls();
render();
