// The attention page's style, markup and script (plot/attention_html_assets.h), as raw strings:
// plain CSS, HTML and JavaScript, readable as they are. The script reads the data block
// {"title", "queries", "keys", "layers", "heads", "signed", "firstLayer", "weights"}
// (attention_page_json) and never writes a label as markup: labels go in as textContent.
#include "tapegrad/plot/attention_html_assets.h"

namespace tg::plot {

const char* const kAttentionViewerStyle = R"css(
:root { color-scheme: light; font-family: "DejaVu Sans", system-ui, sans-serif; }
body { margin: 14px 20px; color: #222; background: #f6f6f4; }
header h1 { font-size: 18px; margin: 0 0 4px; }
.tg-note { margin: 2px 0; font-size: 13px; color: #555; max-width: 75em; }
main { display: flex; flex-wrap: wrap; gap: 20px; align-items: flex-start; margin-top: 10px; }
.tg-panel { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 10px 14px; }
.tg-panel h2 { font-size: 15px; margin: 0 0 6px; }
.tg-hint { font-size: 12px; color: #666; margin: 4px 0 6px; max-width: 36em; }
.tg-controls { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; font-size: 13px; }
.tg-heads { display: flex; flex-wrap: wrap; gap: 4px; }
.tg-head-toggle { --head-color: #888; min-width: 28px; height: 22px; padding: 0 5px;
  border: 2px solid var(--head-color); border-radius: 4px; background: #fff; color: #333;
  font-size: 12px; cursor: pointer; }
.tg-head-toggle[aria-pressed="true"] { background: var(--head-color); color: #fff; }
.tg-readout { font: 12px/16px "DejaVu Sans Mono", ui-monospace, monospace; color: #333;
  margin: 6px 0; white-space: pre-wrap; overflow: hidden; max-width: 44em; }
.tg-head-view { display: flex; align-items: flex-start; }
.tg-tokens { display: flex; flex-direction: column; font-family: "DejaVu Sans Mono", monospace; }
.tg-left .tg-token { text-align: right; }
.tg-token { white-space: pre; padding: 0 6px; max-width: 12em; overflow: hidden;
  text-overflow: ellipsis; border-radius: 3px; cursor: default; box-sizing: border-box; }
.tg-token.tg-focus { outline: 2px solid #333; outline-offset: -2px; }
.tg-grid { display: grid; gap: 6px; align-items: center; justify-content: start; }
.tg-grid-head, .tg-grid-layer { font-size: 12px; color: #555; text-align: center; }
.tg-grid-head { border-bottom: 3px solid var(--head-color); }
.tg-thumb { display: block; border: 1px solid #ddd; border-radius: 3px; background: #fff;
  cursor: pointer; }
.tg-thumb.tg-shown { outline: 2px solid #333; }
)css";

const char* const kAttentionViewerErrorHook = R"js(
window.tgErrors = [];
window.onerror = function (message, source, line) {
  window.tgErrors.push(String(message) + (line ? " (line " + line + ")" : ""));
  if (document.body) {
    document.body.setAttribute("data-errors", window.tgErrors.join(" | "));
    document.body.setAttribute("data-status", "error");
  }
};
)js";

const char* const kAttentionViewerBody = R"html(<main>
<section class="tg-panel" id="tg-head-panel">
<h2>Head view</h2>
<div class="tg-controls">
<label>Layer <select id="tg-layer"></select></label>
<span>Heads</span><span id="tg-heads" class="tg-heads"></span>
<button type="button" id="tg-all-heads">all</button>
</div>
<p class="tg-hint">Queries on the left, keys on the right. Hover a position to see only its
lines; click a head to show or hide it, double-click it to see it alone.</p>
<p id="tg-readout" class="tg-readout"></p>
<div id="tg-head-view" class="tg-head-view">
<div id="tg-left" class="tg-tokens tg-left"></div>
<canvas id="tg-lines"></canvas>
<div id="tg-right" class="tg-tokens tg-right"></div>
</div>
</section>
<section class="tg-panel" id="tg-model-panel">
<h2>Model view</h2>
<p class="tg-hint">Layers down, heads across. Click a thumbnail to show that head in the head
view.</p>
<div id="tg-grid" class="tg-grid"></div>
</section>
</main>
)html";

const char* const kAttentionViewerScript = R"js(
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("tg-data").textContent);
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"];
  const queries = data.queries.length, keys = data.keys.length;
  const longest = Math.max(queries, keys);
  const rowHeight = longest <= 32 ? 20 : longest <= 64 ? 14 : 11;
  const linesWidth = 220;
  const state = { layer: data.firstLayer, active: new Set(), focus: null };
  let linesDrawn = 0;  // for <body data-lines>: the browser test checks something was drawn
  for (let head = 0; head < data.heads; ++head) state.active.add(head);

  function headColor(head) { return PALETTE[head % PALETTE.length]; }

  // A colour "#rrggbb" at opacity alpha, as CSS.
  function tint(color, alpha) {
    const channel = (at) => parseInt(color.slice(at, at + 2), 16);
    return "rgba(" + channel(1) + "," + channel(3) + "," + channel(5) + "," + alpha + ")";
  }

  // What a line's opacity divides by: 1 for probabilities; the head's largest |w| when signed.
  const scales = data.weights.map((layer) => layer.map((head) => {
    if (!data.signed) return 1;
    let largest = 0;
    for (const row of head) for (const w of row) largest = Math.max(largest, Math.abs(w));
    return largest > 0 ? largest : 1;
  }));

  // How strongly query q attends to key k in one head, in [0, 1]: the line's opacity.
  function strength(layer, head, q, k) {
    return Math.min(1, Math.abs(data.weights[layer][head][q][k]) / scales[layer][head]);
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A canvas of width x height CSS pixels, drawn at the screen's resolution.
  function sizeCanvas(canvas, width, height) {
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    const context = canvas.getContext("2d");
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    return context;
  }

  // One head's lines, query q at y = (q + 0.5) * queryStep on the left edge to key k on the
  // right edge; `only` ({side, index} or null) keeps the lines of one position.
  function drawHead(context, layer, head, box, only) {
    context.strokeStyle = headColor(head);
    context.lineWidth = box.lineWidth;
    for (let q = 0; q < queries; ++q) {
      if (only && only.side === "query" && only.index !== q) continue;
      for (let k = 0; k < keys; ++k) {
        if (only && only.side === "key" && only.index !== k) continue;
        const alpha = strength(layer, head, q, k);
        if (alpha < 0.01) continue;
        context.globalAlpha = alpha;
        context.setLineDash(data.weights[layer][head][q][k] < 0 ? [4, 3] : []);
        context.beginPath();
        context.moveTo(0, (q + 0.5) * box.queryStep);
        context.lineTo(box.width, (k + 0.5) * box.keyStep);
        context.stroke();
        ++linesDrawn;
      }
    }
    context.globalAlpha = 1;
    context.setLineDash([]);
  }

  const layerSelect = document.getElementById("tg-layer");
  const headsBox = document.getElementById("tg-heads");
  const leftBox = document.getElementById("tg-left");
  const rightBox = document.getElementById("tg-right");
  const linesCanvas = document.getElementById("tg-lines");
  const readout = document.getElementById("tg-readout");
  const grid = document.getElementById("tg-grid");
  const linesHeight = longest * rowHeight;
  const linesContext = sizeCanvas(linesCanvas, linesWidth, linesHeight);
  // Room for the longest readout (a line, and one a head for up to 4 heads), so that hovering
  // never moves the positions under the pointer.
  readout.style.height = 16 * (1 + Math.min(4, data.heads)) + "px";
  const toggles = [], thumbs = [], leftTokens = [], rightTokens = [];

  // The layer menu: one option a layer.
  function buildLayerSelect() {
    for (let layer = 0; layer < data.layers; ++layer) {
      const option = element("option", "", "layer " + layer);
      option.value = String(layer);
      layerSelect.appendChild(option);
    }
    layerSelect.addEventListener("change", () => {
      state.layer = Number(layerSelect.value);
      draw();
    });
  }

  // The head toggles: click shows or hides a head, double-click shows it alone.
  function buildHeadToggles() {
    for (let head = 0; head < data.heads; ++head) {
      const toggle = element("button", "tg-head-toggle", String(head));
      toggle.type = "button";
      toggle.style.setProperty("--head-color", headColor(head));
      toggle.title = "head " + head + ": click to show or hide, double-click to see it alone";
      toggle.addEventListener("click", () => {
        if (state.active.has(head)) state.active.delete(head); else state.active.add(head);
        draw();
      });
      toggle.addEventListener("dblclick", () => { state.active = new Set([head]); draw(); });
      headsBox.appendChild(toggle);
      toggles.push(toggle);
    }
    document.getElementById("tg-all-heads").addEventListener("click", () => {
      for (let head = 0; head < data.heads; ++head) state.active.add(head);
      draw();
    });
  }

  // One column of positions; hovering one focuses its lines.
  function buildTokens(box, labels, side, list) {
    labels.forEach((label, index) => {
      const token = element("div", "tg-token", label);
      token.title = side + " " + index + ": " + label;
      token.style.height = rowHeight + "px";
      token.style.lineHeight = rowHeight + "px";
      token.style.fontSize = Math.min(13, rowHeight - 2) + "px";
      token.addEventListener("mouseenter", () => { state.focus = { side, index }; draw(); });
      token.addEventListener("mouseleave", () => { state.focus = null; draw(); });
      box.appendChild(token);
      list.push(token);
    });
  }

  // The model view: a thumbnail of every layer and head; a click shows it in the head view.
  function buildModelView() {
    const size = data.heads <= 4 ? 96 : data.heads <= 8 ? 72 : 48;
    grid.style.gridTemplateColumns = "auto repeat(" + data.heads + ", " + size + "px)";
    grid.appendChild(element("div", "tg-grid-corner", ""));
    for (let head = 0; head < data.heads; ++head) {
      const label = element("div", "tg-grid-head", "head " + head);
      label.style.setProperty("--head-color", headColor(head));
      grid.appendChild(label);
    }
    const box = { width: size, queryStep: size / queries, keyStep: size / keys, lineWidth: 1 };
    for (let layer = 0; layer < data.layers; ++layer) {
      grid.appendChild(element("div", "tg-grid-layer", "layer " + layer));
      for (let head = 0; head < data.heads; ++head) {
        const thumb = element("canvas", "tg-thumb");
        thumb.dataset.layer = String(layer);
        thumb.dataset.head = String(head);
        thumb.title = "layer " + layer + ", head " + head;
        drawHead(sizeCanvas(thumb, size, size), layer, head, box, null);
        thumb.addEventListener("click", () => {
          state.layer = layer;
          state.active = new Set([head]);
          draw();
        });
        grid.appendChild(thumb);
        thumbs.push(thumb);
      }
    }
  }

  // The other column's positions tinted by the focused position's weights (the strongest
  // shown head's colour), and the focused one outlined.
  function shadeTokens() {
    const focus = state.focus;
    const others = focus && focus.side === "query" ? rightTokens : leftTokens;
    for (const token of leftTokens.concat(rightTokens)) {
      token.style.backgroundColor = "";
      token.classList.remove("tg-focus");
    }
    if (!focus) return;
    (focus.side === "query" ? leftTokens : rightTokens)[focus.index].classList.add("tg-focus");
    others.forEach((token, index) => {
      let best = 0, bestHead = -1;
      for (const head of state.active) {
        const [q, k] = focus.side === "query" ? [focus.index, index] : [index, focus.index];
        const s = strength(state.layer, head, q, k);
        if (s > best) { best = s; bestHead = head; }
      }
      if (bestHead >= 0) token.style.backgroundColor = tint(headColor(bestHead), 0.8 * best);
    });
  }

  // A weight as text: 3 decimals, or 2 significant digits when smaller.
  function formatWeight(w) {
    return Math.abs(w) >= 0.001 || w === 0 ? w.toFixed(3) : w.toPrecision(2);
  }

  // What the head view shows, in words; with a focused position, its strongest weights a head.
  function describe() {
    const shown = [...state.active].sort((a, b) => a - b);
    if (!state.focus) {
      const scale = data.signed ? "|weight| / the head's largest |weight| (dashed: negative)"
                                : "the weight";
      return "layer " + state.layer + ", heads " + (shown.length ? shown.join(" ") : "none") +
             "; a line's opacity is " + scale + ".";
    }
    const focus = state.focus;
    const labels = focus.side === "query" ? data.keys : data.queries;
    const name = (focus.side === "query" ? data.queries : data.keys)[focus.index];
    const lines = [focus.side + " " + focus.index + " \u201c" + name + "\u201d, layer " +
                   state.layer];
    for (const head of shown.slice(0, 4)) {
      const row = labels.map((label, index) => {
        const [q, k] = focus.side === "query" ? [focus.index, index] : [index, focus.index];
        return { label, w: data.weights[state.layer][head][q][k] };
      });
      row.sort((a, b) => Math.abs(b.w) - Math.abs(a.w));
      lines.push("head " + head + ": " + row.slice(0, 4).map(
          (entry) => "\u201c" + entry.label + "\u201d " + formatWeight(entry.w)).join(", "));
    }
    return lines.join("\n");
  }

  // Redraws the head view and marks what it shows in the controls and the model view.
  function draw() {
    linesContext.clearRect(0, 0, linesWidth, linesHeight);
    const box = { width: linesWidth, queryStep: rowHeight, keyStep: rowHeight, lineWidth: 2 };
    for (const head of [...state.active].sort((a, b) => a - b)) {
      drawHead(linesContext, state.layer, head, box, state.focus);
    }
    layerSelect.value = String(state.layer);
    toggles.forEach((toggle, head) => {
      toggle.setAttribute("aria-pressed", String(state.active.has(head)));
    });
    for (const thumb of thumbs) {
      const shown = Number(thumb.dataset.layer) === state.layer &&
                    state.active.has(Number(thumb.dataset.head));
      thumb.classList.toggle("tg-shown", shown);
    }
    shadeTokens();
    readout.textContent = describe();
  }

  // With #selftest in the address (the browser test): the controls driven through their own
  // event handlers, each outcome checked; <body data-selftest> says "ok" or what failed.
  function selfTest() {
    const failed = [];
    const check = (name, ok) => { if (!ok) failed.push(name); };
    const last = thumbs[thumbs.length - 1], lastHead = data.heads - 1;
    last.dispatchEvent(new MouseEvent("click"));
    check("thumbnail click", state.layer === data.layers - 1 && state.active.size === 1 &&
          state.active.has(lastHead) && last.classList.contains("tg-shown") &&
          layerSelect.value === String(data.layers - 1));
    const query = leftTokens[queries - 1];
    query.dispatchEvent(new MouseEvent("mouseenter"));
    check("query hover", query.classList.contains("tg-focus") &&
          readout.textContent.startsWith("query " + (queries - 1)) &&
          readout.textContent.includes("head " + lastHead));
    query.dispatchEvent(new MouseEvent("mouseleave"));
    rightTokens[0].dispatchEvent(new MouseEvent("mouseenter"));
    check("key hover", readout.textContent.startsWith("key 0"));
    rightTokens[0].dispatchEvent(new MouseEvent("mouseleave"));
    check("hover ends", state.focus === null && !readout.textContent.startsWith("key"));
    toggles[lastHead].dispatchEvent(new MouseEvent("click"));
    check("toggle hides", state.active.size === 0 &&
          toggles[lastHead].getAttribute("aria-pressed") === "false");
    document.getElementById("tg-all-heads").dispatchEvent(new MouseEvent("click"));
    check("all heads", state.active.size === data.heads);
    layerSelect.value = "0";
    layerSelect.dispatchEvent(new Event("change"));
    check("layer menu", state.layer === 0 && thumbs[0].classList.contains("tg-shown"));
    document.body.setAttribute("data-selftest", failed.length ? failed.join(", ") : "ok");
  }

  // A view named in the address: #layer=1&heads=0,2&focus=query:5 (each part optional) opens
  // the head view on layer 1, heads 0 and 2, the lines of query 5. Out-of-range parts are ignored.
  function openNamedView() {
    const named = new URLSearchParams(window.location.hash.slice(1));
    const inRange = (text, count) => /^[0-9]+$/.test(text || "") && Number(text) < count;
    if (inRange(named.get("layer"), data.layers)) state.layer = Number(named.get("layer"));
    const heads = (named.get("heads") || "").split(",").filter((h) => inRange(h, data.heads));
    if (heads.length) state.active = new Set(heads.map(Number));
    const [side, index] = (named.get("focus") || "").split(":");
    if ((side === "query" && inRange(index, queries)) || (side === "key" && inRange(index, keys))) {
      state.focus = { side, index: Number(index) };
    }
  }

  buildLayerSelect();
  buildHeadToggles();
  buildTokens(leftBox, data.queries, "query", leftTokens);
  buildTokens(rightBox, data.keys, "key", rightTokens);
  buildModelView();
  openNamedView();
  draw();
  document.body.setAttribute("data-layers", String(data.layers));
  document.body.setAttribute("data-heads", String(data.heads));
  document.body.setAttribute("data-lines", String(linesDrawn));
  if (window.location.hash === "#selftest") selfTest();
  if (window.tgErrors.length === 0) document.body.setAttribute("data-status", "ok");
})();
)js";

}  // namespace tg::plot
