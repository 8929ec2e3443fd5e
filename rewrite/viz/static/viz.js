// uopc viz: the page that shows a trace written by rewrite.viz (format: rewrite/viz/serialize.py).
// Scale: nodes are a flat table (ids); a graph view draws at most `budget` nodes (the top levels from its root,
// more on click), lists are paged, and indexes (consumers, firings by result) are built only when first asked.
"use strict";

let T = null; // the trace
const PAGE = 100; // rows per page of a list
const BUDGET = 120; // nodes a graph view starts with
const FAN = 40; // sources one click on "+n" adds
const NODE_W = 118, NODE_H = 30, GAP_X = 14, GAP_Y = 46;

const $ = (sel, el = document) => el.querySelector(sel);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmt = (x, d = 3) => (typeof x === "number" ? x.toFixed(d) : String(x ?? ""));
const op = (id) => T.nodes[id][0];
const srcs = (id) => T.nodes[id][4];

// ------------------------------------------------------------------------------------------ derived indexes

const idx = {};
function madeBy() { // node id -> indices of the firings whose result it is, in firing order
  if (!idx.madeBy) {
    const m = new Map();
    T.firings.forEach((f, i) => { const l = m.get(f[3]); if (l) l.push(i); else m.set(f[3], [i]); });
    idx.madeBy = m;
  }
  return idx.madeBy;
}
function consumers() { // node id -> ids of the nodes that use it (over the whole table)
  if (!idx.consumers) {
    const c = new Array(T.nodes.length);
    T.nodes.forEach((n, i) => { for (const s of n[4]) (c[s] || (c[s] = [])).push(i); });
    idx.consumers = c;
  }
  return idx.consumers;
}
function reach(root) { // every node id under root (cached per root)
  idx.reach = idx.reach || new Map();
  let s = idx.reach.get(root);
  if (s) return s;
  s = new Set([root]);
  const stack = [root];
  while (stack.length) for (const x of srcs(stack.pop())) if (!s.has(x)) { s.add(x); stack.push(x); }
  idx.reach.set(root, s);
  return s;
}

// ------------------------------------------------------------------------------------------ provenance

// How a node came to be, one step back: the input of the first firing whose result it is, else the node a stage's
// function built it from (T.derived), else the node it was rebuilt from (the engine rebuilds a node when a source was rewritten: same op and arg, and each source either
// the same or one that rewrote into this one's). Memoized; the work is bounded by the graph under the node, and
// the recursion by MAX_DEPTH (deeper: treated as unknown) so a long chain cannot overflow the stack.
const MAX_DEPTH = 400, MAX_CHAIN = 64;
function previous(id, depth = 0) {
  idx.prev = idx.prev || new Map();
  if (idx.prev.has(id)) return idx.prev.get(id);
  if (depth > MAX_DEPTH) return null;
  idx.prev.set(id, null); // a cycle back to id finds nothing
  if (!idx.derived) idx.derived = new Map((T.derived || []).map(([n, o, how]) => [n, { kind: "derived", from: o, how }]));
  const fl = madeBy().get(id);
  const p = fl ? { kind: "firing", firing: fl[0], from: T.firings[fl[0]][2] } : idx.derived.get(id) || rebuiltFrom(id, depth);
  idx.prev.set(id, p);
  return p;
}
function chain(id, depth = 0) { // id and the nodes it was made from, newest first (at most MAX_CHAIN)
  const out = [id];
  for (let p = previous(id, depth + 1); p && out.length < MAX_CHAIN && !out.includes(p.from); p = previous(p.from, depth + 1)) out.push(p.from);
  return out;
}
function rebuiltFrom(id, depth) {
  const n = T.nodes[id], ss = n[4];
  if (!ss.length || T.node_callsite[id] !== undefined) return null;
  const cons = consumers();
  const chains = ss.map((s) => chain(s, depth));
  for (let j = 0; j < ss.length; j++) {
    for (const p of chains[j].slice(1)) {
      for (const y of cons[p] || []) {
        const m = T.nodes[y];
        if (y === id || m[0] !== n[0] || m[1] !== n[1] || m[4].length !== ss.length) continue;
        if (m[4].every((s, k) => chains[k].includes(s))) return { kind: "rebuilt", from: y };
      }
    }
  }
  return null;
}

function introducedBy(id) { // the first recorded stage whose output holds `id` and whose input does not
  for (let r = 0; r < T.realizes.length; r++) {
    const st = T.realizes[r].stages;
    for (let s = 0; s < st.length; s++) {
      if (reach(st[s].after).has(id) && !reach(st[s].before).has(id)) return [r, s];
    }
  }
  return null;
}

// Steps from the node back to where it came from: rule firings, rebuilds (a source was rewritten), the stage
// that made it by a function, and the Tensor call that created it.
function provenance(id) {
  const steps = [], seen = new Set();
  let x = id;
  while (!seen.has(x) && steps.length < 200) {
    seen.add(x);
    const site = T.node_callsite[x];
    if (site !== undefined) { steps.push({ kind: "tensor", node: x, site }); break; }
    const p = previous(x);
    if (!p) { steps.push({ kind: "origin", node: x, stage: introducedBy(x) }); break; }
    steps.push({ ...p, node: x });
    x = p.from;
  }
  return steps;
}

// ------------------------------------------------------------------------------------------ graph view

// A view of the graph under `root`: the visible nodes, how many sources of each are shown, laid out in layers
// by longest path from the root and ordered by barycenters (a small Sugiyama layout of the visible part only).
class GraphView {
  constructor(el, root, title) {
    this.el = el; this.root = root; this.title = title;
    this.shown = new Map(); // visible node -> number of its sources shown
    this.selected = null;
    this.grow([root], BUDGET);
    this.render();
  }
  grow(start, budget) { // breadth-first from `start`, showing sources until `budget` more nodes are visible
    let added = 0;
    const queue = [...start];
    for (const s of start) if (!this.shown.has(s)) { this.shown.set(s, 0); added++; }
    for (let qi = 0; qi < queue.length; qi++) {
      const n = queue[qi], ss = srcs(n);
      let k = this.shown.get(n);
      while (k < ss.length && k < FAN) {
        const s = ss[k];
        if (!this.shown.has(s)) { if (added >= budget) break; this.shown.set(s, 0); added++; queue.push(s); }
        k++;
      }
      this.shown.set(n, k);
      if (added >= budget) break;
    }
  }
  expand(id) { // one click on "+n": the next FAN sources of id, and their sources up to a small budget
    const ss = srcs(id), k0 = this.shown.get(id), k1 = Math.min(ss.length, k0 + FAN);
    const fresh = [];
    for (let k = k0; k < k1; k++) if (!this.shown.has(ss[k])) { this.shown.set(ss[k], 0); fresh.push(ss[k]); }
    this.shown.set(id, k1);
    this.grow(fresh, 30);
    this.render();
  }
  more() { this.grow([...this.shown.keys()], Math.max(BUDGET, this.shown.size)); this.render(); }
  layout() {
    const order = [], state = new Map(); // reverse postorder over visible edges: consumers before sources
    const stack = [[this.root, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1], [n, i] = top, k = this.shown.get(n);
      if (i === 0) { if (state.has(n)) { stack.pop(); continue; } state.set(n, 1); }
      if (i < k) { top[1]++; const s = srcs(n)[i]; if (!state.has(s)) stack.push([s, 0]); continue; }
      stack.pop(); order.push(n);
    }
    order.reverse();
    const layer = new Map([[this.root, 0]]);
    for (const n of order) {
      const l = layer.get(n) ?? 0, k = this.shown.get(n), ss = srcs(n);
      for (let i = 0; i < k; i++) if ((layer.get(ss[i]) ?? -1) < l + 1) layer.set(ss[i], l + 1);
    }
    const layers = [];
    for (const n of order) (layers[layer.get(n)] || (layers[layer.get(n)] = [])).push(n);
    const pos = new Map();
    const place = () => layers.forEach((ns) => ns.forEach((n, i) => pos.set(n, i - (ns.length - 1) / 2)));
    place();
    const ups = new Map(); // visible source -> its visible consumers
    for (const n of order) { const ss = srcs(n), k = this.shown.get(n); for (let i = 0; i < k; i++) (ups.get(ss[i]) || ups.set(ss[i], []).get(ss[i])).push(n); }
    const bary = (n, nbrs) => (nbrs && nbrs.length ? nbrs.reduce((a, m) => a + pos.get(m), 0) / nbrs.length : pos.get(n));
    for (let sweep = 0; sweep < 4; sweep++) {
      const down = sweep % 2 === 0;
      for (let li = down ? 1 : layers.length - 2; down ? li < layers.length : li >= 0; li += down ? 1 : -1) {
        const ns = layers[li];
        if (!ns) continue;
        const key = new Map(ns.map((n) => [n, down ? bary(n, ups.get(n)) : bary(n, srcs(n).slice(0, this.shown.get(n)))]));
        ns.sort((a, b) => key.get(a) - key.get(b));
        ns.forEach((n, i) => pos.set(n, i - (ns.length - 1) / 2));
      }
    }
    return { layers, pos, layer };
  }
  render() {
    const { layers, pos, layer } = this.layout();
    const xy = (n) => [pos.get(n) * (NODE_W + GAP_X), layer.get(n) * (NODE_H + GAP_Y)];
    const out = [];
    for (const ns of layers) for (const n of ns || []) {
      const [x, y] = xy(n), ss = srcs(n), k = this.shown.get(n);
      for (let i = 0; i < k; i++) {
        const [sx, sy] = xy(ss[i]), my = (y + NODE_H + sy) / 2;
        out.push(`<path class="edge" d="M${x} ${y + NODE_H}C${x} ${my} ${sx} ${my} ${sx} ${sy}"/>`);
      }
    }
    let minx = 0, maxx = 0, maxy = 0;
    for (const ns of layers) for (const n of ns || []) {
      const [x, y] = xy(n), row = T.nodes[n], ss = row[4], k = this.shown.get(n);
      minx = Math.min(minx, x); maxx = Math.max(maxx, x); maxy = Math.max(maxy, y);
      const grp = T.groups[row[0]] || "other";
      const sub = row[1].length > 17 ? row[1].slice(0, 16) + "…" : row[1];
      out.push(`<g class="node g-${grp}${n === this.selected ? " sel" : ""}" data-id="${n}" transform="translate(${x - NODE_W / 2},${y})">` +
        `<rect width="${NODE_W}" height="${NODE_H}"/><text x="5" y="12">${esc(row[0])}</text>` +
        `<text class="sub" x="5" y="25">${esc(sub)}</text></g>`);
      if (k < ss.length) {
        out.push(`<g class="more" data-id="${n}" transform="translate(${x + NODE_W / 2 - 4},${y + NODE_H})">` +
          `<circle r="9"/><text x="0" y="3" text-anchor="middle">+${ss.length - k}</text></g>`);
      }
    }
    const pad = 20;
    this.vb = [minx - NODE_W / 2 - pad, -pad, maxx - minx + NODE_W + 2 * pad, maxy + NODE_H + 2 * pad];
    // fit the pane, but never enlarge, and shrink at most 2.5x so labels stay legible (pan and zoom for the rest);
    // the root stays at the top
    const w = this.el.clientWidth || 400, h = this.el.clientHeight || 300;
    const s = Math.min(Math.max(this.vb[2] / w, this.vb[3] / h, 1), 2.5);
    this.vb = [this.vb[0] + (this.vb[2] - w * s) / 2, this.vb[1], w * s, h * s];
    this.el.innerHTML = `<svg viewBox="${this.vb.join(" ")}">${out.join("")}</svg>`;
    this.svg = this.el.firstChild;
    this.el.dataset.nodes = String(this.shown.size);
    if (!this.wired) this.wire();
  }
  wire() {
    this.wired = true;
    const el = this.el;
    el.addEventListener("click", (e) => {
      if (this.dragged) return;
      const more = e.target.closest(".more");
      if (more) { this.expand(+more.dataset.id); return; }
      const g = e.target.closest(".node");
      if (g) { this.select(+g.dataset.id); showNode(+g.dataset.id); }
    });
    el.addEventListener("mouseover", (e) => { const g = e.target.closest(".node"); if (g) showTip(+g.dataset.id, e); });
    el.addEventListener("mousemove", (e) => { if ($("#tip").style.display === "block") moveTip(e); });
    el.addEventListener("mouseout", (e) => { if (e.target.closest(".node")) hideTip(); });
    el.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = el.getBoundingClientRect(), f = e.deltaY > 0 ? 1.2 : 1 / 1.2;
      const px = this.vb[0] + ((e.clientX - r.left) / r.width) * this.vb[2], py = this.vb[1] + ((e.clientY - r.top) / r.height) * this.vb[3];
      this.vb = [px - (px - this.vb[0]) * f, py - (py - this.vb[1]) * f, this.vb[2] * f, this.vb[3] * f];
      this.svg.setAttribute("viewBox", this.vb.join(" "));
    }, { passive: false });
    el.addEventListener("mousedown", (e) => {
      const x0 = e.clientX, y0 = e.clientY, vb0 = [...this.vb], r = el.getBoundingClientRect();
      this.dragged = false;
      const move = (m) => {
        const dx = m.clientX - x0, dy = m.clientY - y0;
        if (Math.abs(dx) + Math.abs(dy) > 3) this.dragged = true;
        this.vb = [vb0[0] - (dx * vb0[2]) / r.width, vb0[1] - (dy * vb0[3]) / r.height, vb0[2], vb0[3]];
        this.svg.setAttribute("viewBox", this.vb.join(" "));
      };
      const up = () => { window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); setTimeout(() => { this.dragged = false; }, 0); };
      window.addEventListener("mousemove", move);
      window.addEventListener("mouseup", up);
    });
  }
  select(id) {
    this.selected = id;
    for (const g of this.el.querySelectorAll(".node.sel")) g.classList.remove("sel");
    const g = this.el.querySelector(`.node[data-id="${id}"]`);
    if (g) g.classList.add("sel");
  }
}

function graphPanes(parent, graphs) { // side-by-side panes, laid out before any is drawn (each fits its own width)
  const panes = graphs.map(([root, title]) => {
    const pane = document.createElement("div");
    pane.className = "pane";
    pane.innerHTML = `<div class="pane-head"><b>${esc(title)}</b> <span class="muted">${reach(root).size} nodes</span>` +
      `<button class="more-btn">show more</button></div><div class="graph"></div>`;
    parent.appendChild(pane);
    return pane;
  });
  return panes.map((pane, i) => {
    const view = new GraphView($(".graph", pane), graphs[i][0], graphs[i][1]);
    $(".more-btn", pane).onclick = () => view.more();
    return view;
  });
}

// ------------------------------------------------------------------------------------------ tooltip, node info

function nodeLine(id) { const n = T.nodes[id]; return `${n[0]}:${n[2]}${n[3] && n[3] !== "()" ? n[3] : ""}`; }
function showTip(id, e) {
  const n = T.nodes[id], tip = $("#tip");
  tip.textContent = `#${id} ${n[0]}\ndtype ${n[2]}\nshape ${n[3]}` + (n[1] ? `\narg ${n[1]}` : "") + `\nsources ${n[4].length}`;
  tip.style.display = "block";
  moveTip(e);
}
function moveTip(e) { const tip = $("#tip"); tip.style.left = `${e.clientX + 14}px`; tip.style.top = `${e.clientY + 10}px`; }
function hideTip() { $("#tip").style.display = "none"; }

function nodeLink(id) { return `<span class="link node-link mono" data-node="${id}">#${id} ${esc(nodeLine(id))}</span>`; }

function showNode(id) {
  const n = T.nodes[id], box = $("#node-info");
  box.classList.remove("muted");
  const steps = provenance(id);
  const items = steps.map((s) => {
    if (s.kind === "tensor") return `<li class="prov-tensor">created by the Tensor call <span class="mono">${esc(T.callsites[s.site])}</span></li>`;
    if (s.kind === "firing") {
      const f = T.firings[s.firing], rule = T.rules[f[1]];
      return `<li class="prov-firing link" data-firing="${s.firing}">${nodeLink(s.node)} made by rule <span class="rule">${esc(rule[0])}</span> ` +
        `(firing #${s.firing}, ${esc(T.stages[f[0]])}) <span class="loc">${esc(rule[1])}</span></li>`;
    }
    if (s.kind === "derived") return `<li class="prov-derived">${nodeLink(s.node)} built from ${nodeLink(s.from)} by ${esc(s.how)}</li>`;
    if (s.kind === "rebuilt") return `<li class="prov-rebuilt">${nodeLink(s.node)} rebuilt from ${nodeLink(s.from)} (a source was rewritten)</li>`;
    const st = s.stage ? T.realizes[s.stage[0]].stages[s.stage[1]] : null;
    return `<li class="prov-origin">${nodeLink(s.node)} ` + (st ? `made by stage <b>${esc(st.name)}</b>${st.kernel ? " (" + esc(st.kernel) + ")" : ""} (a function, not a rule)` : "not made by any recorded rule or stage") + "</li>";
  });
  box.innerHTML = `<h3>node #${id}</h3><table class="kv">` +
    `<tr><td>op</td><td class="mono">${esc(n[0])}</td></tr><tr><td>group</td><td>${esc(T.groups[n[0]] || "other")}</td></tr>` +
    `<tr><td>dtype</td><td class="mono">${esc(n[2])}</td></tr><tr><td>shape</td><td class="mono">${esc(n[3])}</td></tr>` +
    `<tr><td>arg</td><td class="mono">${esc(n[1])}</td></tr>` +
    `<tr><td>sources</td><td>${n[4].slice(0, 12).map(nodeLink).join("<br>")}${n[4].length > 12 ? `<br>... ${n[4].length - 12} more` : ""}</td></tr></table>` +
    `<h3>provenance</h3><ol class="prov" id="provenance">${items.join("")}</ol>`;
}

document.addEventListener("click", (e) => {
  const fl = e.target.closest("[data-firing]");
  if (fl && !e.target.closest("[data-node]")) { showFiring(+fl.dataset.firing); return; }
  const nl = e.target.closest("[data-node]");
  if (nl) showNode(+nl.dataset.node);
});

// ------------------------------------------------------------------------------------------ lists and views

function pager(el, total, render) { // a paged list: render(first, last) fills `el`'s body for one page
  let page = 0;
  const pages = Math.max(1, Math.ceil(total / PAGE));
  const draw = () => {
    const a = page * PAGE, b = Math.min(total, a + PAGE);
    el.innerHTML = (pages > 1 ? `<div class="pager"><button class="prev">prev</button><button class="next">next</button>` +
      `<span class="muted">${a + 1}-${b} of ${total}</span></div>` : "") + render(a, b);
    if (pages > 1) {
      $(".prev", el).onclick = () => { if (page > 0) { page--; draw(); } };
      $(".next", el).onclick = () => { if (page < pages - 1) { page++; draw(); } };
    }
  };
  draw();
}

function firingRows(first, last, a, b) {
  let rows = "";
  for (let i = first + a; i < first + b && i < last; i++) {
    const f = T.firings[i], rule = T.rules[f[1]];
    rows += `<tr class="clickable firing-row" data-firing="${i}"><td class="num">${i}</td><td class="rule">${esc(rule[0])}</td>` +
      `<td>${esc(T.stages[f[0]])}</td><td class="mono">${esc(nodeLine(f[2]))} → ${esc(nodeLine(f[3]))}</td><td class="loc">${esc(rule[1])}</td></tr>`;
  }
  return `<table class="firings"><tr><th>#</th><th>rule</th><th>rewrite</th><th>before → after</th><th>defined at</th></tr>${rows}</table>`;
}

function select(sel) {
  for (const el of document.querySelectorAll(".selected")) el.classList.remove("selected");
  const el = sel && document.querySelector(sel);
  if (el) el.classList.add("selected");
}

function showStage(r, s) {
  const st = T.realizes[r].stages[s], main = $("#main");
  select(`.stage-row[data-r="${r}"][data-s="${s}"]`);
  const [first, last] = st.firings;
  main.innerHTML = `<h2 id="view-title">stage ${esc(st.name)}${st.kernel ? " · kernel " + esc(st.kernel) : ""} · ${last - first} firings · ${fmt(st.ms)} ms</h2>` +
    `<div class="graphs"></div><h3>rule firings in order</h3><div id="firing-list"></div>`;
  graphPanes($(".graphs", main), [[st.before, "before"], [st.after, "after"]]);
  pager($("#firing-list"), last - first, (a, b) => (last > first ? firingRows(first, last, a, b) : `<p class="muted">no rule fired in this stage</p>`));
}

function showAllFirings() {
  select("#all-firings");
  $("#main").innerHTML = `<h2 id="view-title">all ${T.firings.length} rule firings</h2><div id="firing-list"></div>`;
  pager($("#firing-list"), T.firings.length, (a, b) => firingRows(0, T.firings.length, a, b));
}

function showFiring(i) {
  const f = T.firings[i], rule = T.rules[f[1]], main = $("#main");
  select(null);
  main.innerHTML = `<h2 id="view-title">firing #${i}: <span class="rule">${esc(rule[0])}</span> in ${esc(T.stages[f[0]])}</h2>` +
    `<div class="loc" id="rule-loc">${esc(rule[1])}</div><pre class="box" id="rule-src">${esc(rule[2] || "")}</pre>` +
    `<div class="graphs"></div>`;
  graphPanes($(".graphs", main), [[f[2], `before: ${nodeLine(f[2])}`], [f[3], `after: ${nodeLine(f[3])}`]]);
}

function showKernel(r, j) {
  const run = T.realizes[r].runs[j], k = T.kernels[run.kernel];
  select(`.kernel-row[data-r="${r}"][data-k="${j}"]`);
  $("#main").innerHTML = `<h2 id="view-title">kernel ${esc(k.name)}</h2><table class="kv" id="kernel-stats">` +
    `<tr><td>device</td><td>${esc(k.device)}</td></tr><tr><td>time</td><td>${fmt(run.ms, 4)} ms</td></tr>` +
    `<tr><td>GB/s</td><td>${fmt(run.gbs)}</td></tr><tr><td>GFLOP/s</td><td>${fmt(run.gflops)}</td></tr>` +
    `<tr><td>FLOPs</td><td>${k.flops ?? "?"}</td></tr><tr><td>bytes</td><td>${k.mem_bytes ?? "?"}</td></tr></table>` +
    `<h3>opts</h3><pre class="box" id="kernel-opts">${esc((k.opts || []).join("\n") || "(none)")}</pre>` +
    `<h3>LINEAR</h3><pre class="box" id="kernel-linear">${esc(k.linear || "(compiled before recording began)")}</pre>` +
    `<h3>source</h3><pre class="box" id="kernel-source">${esc(k.source || "")}</pre>`;
}

function buildNav() {
  const nav = $("#nav");
  const legend = Object.keys(Object.fromEntries(Object.values(T.groups).map((g) => [g, 1]))).sort()
    .map((g) => `<span class="g g-${g}">${g}</span>`).join("");
  nav.innerHTML = `<div class="legend" id="legend">${legend}</div>` +
    `<div class="clickable link" id="all-firings">all rule firings (${T.firings.length})</div><div id="realizes"></div>`;
  $("#all-firings").onclick = showAllFirings;
  pager($("#realizes"), T.realizes.length, (a, b) => {
    let html = "";
    for (let r = a; r < b; r++) {
      const R = T.realizes[r];
      const rows = R.stages.map((st, s) => `<tr class="clickable stage-row" data-r="${r}" data-s="${s}"><td>${esc(st.name)}</td>` +
        `<td class="muted">${esc(st.kernel)}</td><td class="num">${st.firings[1] - st.firings[0]}</td><td class="num">${fmt(st.ms, 1)}</td></tr>`).join("");
      const kernels = R.runs.slice(0, PAGE).map((run, j) => `<li class="clickable kernel-row" data-r="${r}" data-k="${j}">` +
        `${esc(T.kernels[run.kernel].name)} <span class="muted">${fmt(run.ms, 3)} ms</span></li>`).join("");
      html += `<details class="realize" ${r === a ? "open" : ""}><summary>${esc(R.label)} <span class="muted">${R.stages.length} stages, ${R.runs.length} kernels</span></summary>` +
        `<table class="pipeline"><tr><th>stage</th><th>kernel</th><th>firings</th><th>ms</th></tr>${rows}</table>` +
        `<ul class="kernels">${kernels}${R.runs.length > PAGE ? `<li class="muted">... ${R.runs.length - PAGE} more</li>` : ""}</ul></details>`;
    }
    return html;
  });
  nav.addEventListener("click", (e) => {
    const sr = e.target.closest(".stage-row"); if (sr) showStage(+sr.dataset.r, +sr.dataset.s);
    const kr = e.target.closest(".kernel-row"); if (kr) showKernel(+kr.dataset.r, +kr.dataset.k);
  });
}

async function main() {
  const t0 = performance.now();
  const res = await fetch("trace.json");
  T = await res.json();
  const t1 = performance.now();
  const nk = T.realizes.reduce((a, r) => a + r.runs.length, 0);
  $("#summary").textContent = `${T.realizes.length} realizes · ${T.nodes.length} nodes · ${T.firings.length} rule firings · ${nk} kernel runs`;
  buildNav();
  const first = T.realizes.findIndex((r) => r.stages.length);
  if (first >= 0) showStage(first, 0);
  else if (T.firings.length) showAllFirings();
  window.vizTiming = { fetchParse: t1 - t0, firstRender: performance.now() - t0, sinceNavigation: performance.now() };
  document.body.dataset.ready = "1";
}

main().catch((e) => { $("#summary").textContent = `could not load trace.json: ${e}`; document.body.dataset.ready = "error"; });
