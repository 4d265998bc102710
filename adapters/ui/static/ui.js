// The inspector's only script: it draws the timeline and keeps it current, expands collapsed
// outputs in place and filters the sessions table as you type. Every page works without it.
"use strict";

const PARTS = ["system", "metadata", "chat", "active"];
const BAR = 8;
const HEIGHT = 220;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function number(n) {
  return n === null || n === undefined ? "—" : n.toLocaleString("en");
}

// -- the timeline ---------------------------------------------------------------------------

function drawTimeline(box, requests) {
  const top = Math.max(1, ...requests.map((r) => Math.max(r.managed, r.naive || 0)));
  const width = Math.max(requests.length * (2 * BAR + 2), 200);
  const svg = el("svg:svg", {
    class: "chart", width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`,
    role: "img", "aria-label": "tokens per request",
  });
  const scale = (HEIGHT - 20) / top;
  requests.forEach((r, k) => {
    const x = k * (2 * BAR + 2);
    let y = HEIGHT;
    for (const part of PARTS) {
      const size = r.parts[part] * scale;
      if (size > 0) {
        y -= size;
        svg.append(el("svg:rect", { class: part, x, y: y.toFixed(1), width: BAR, height: size.toFixed(1) }));
      }
    }
    if (r.naive) {
      const size = r.naive * scale;
      svg.append(el("svg:rect", {
        class: "naive", x: x + BAR, y: (HEIGHT - size).toFixed(1), width: BAR, height: size.toFixed(1),
      }));
    }
    if (r.marks.length) {
      const kinds = [...new Set(r.marks.map((m) => m.kind))].sort().join(" ");
      const mark = el("svg:text", { class: `mark ${kinds}`, x: x + BAR / 2, y: 10 }, "▲");
      mark.append(el("svg:title", {}, r.marks.map((m) => m.text).join("; ")));
      svg.append(mark);
    }
    const link = el("svg:a", { href: box.dataset.link + r.n });
    const hit = el("svg:rect", { class: "hit", x, y: 0, width: 2 * BAR, height: HEIGHT });
    hit.append(el("svg:title", {}, `request ${r.n}: ${number(r.managed)} managed, ${number(r.naive || 0)} naive`));
    link.append(hit);
    svg.append(link);
  });
  box.replaceChildren(svg);
}

function requestRow(link, r) {
  const row = el("tr", { id: `r${r.n}` });
  const first = el("td");
  first.append(el("a", { href: link + r.n }, String(r.n)));
  if (r.round) first.append(` (round ${r.round})`);
  row.append(first, el("td", {}, (r.at || "").replace("T", " ").slice(0, 19)));
  for (const value of [r.naive, r.managed, r.shared, ...PARTS.map((p) => r.parts[p])]) {
    row.append(el("td", { class: "num" }, number(value)));
  }
  row.append(el("td", { class: "marks" }, r.marks.map((m) => m.text).join(", ")));
  return row;
}

function watchTimeline(box) {
  const data = document.getElementById("timeline-data");
  const requests = data ? JSON.parse(data.textContent) : [];
  const table = document.querySelector("#requests tbody");
  const status = el("p", { class: "live", id: "live" }, "live: watching for new requests");
  box.after(status);
  drawTimeline(box, requests);
  box.scrollLeft = box.scrollWidth;
  let busy = false;
  async function poll() {
    if (busy || document.visibilityState === "hidden") return;
    busy = true;
    try {
      const answer = await fetch(`${box.dataset.src}?after=${requests.length}`, {
        credentials: "same-origin", cache: "no-store",
      });
      if (!answer.ok) throw new Error(`${answer.status}`);
      const update = await answer.json();
      if (update.requests.length) {
        requests.push(...update.requests);
        drawTimeline(box, requests);
        box.scrollLeft = box.scrollWidth;
        for (const r of update.requests) table.append(requestRow(box.dataset.link, r));
      }
      status.textContent = `live: ${requests.length} requests, checked ${new Date().toLocaleTimeString("en-GB")}`;
      status.dataset.count = String(requests.length);
    } catch (error) {
      status.textContent = `live: the inspector did not answer (${error.message}); retrying`;
    } finally {
      busy = false;
    }
  }
  setInterval(poll, 1000);
}

// -- collapsed outputs ----------------------------------------------------------------------

function expandable(details) {
  details.addEventListener("toggle", async () => {
    if (!details.open || details.dataset.loaded) return;
    const pre = details.querySelector("pre.content");
    pre.textContent = "loading…";
    try {
      const answer = await fetch(details.dataset.src, { credentials: "same-origin" });
      if (!answer.ok) throw new Error(`${answer.status}`);
      pre.textContent = await answer.text();
      details.dataset.loaded = "1";
    } catch (error) {
      pre.textContent = `could not load it (${error.message})`;
    }
  });
}

// -- parts of a page that load after it ---------------------------------------------------

async function include(box) {
  try {
    const answer = await fetch(box.dataset.include, { credentials: "same-origin" });
    if (!answer.ok) throw new Error(`${answer.status}`);
    box.innerHTML = await answer.text(); // the inspector's own HTML, escaped where it was made
  } catch (error) {
    box.append(` (could not load it: ${error.message})`);
  }
}

// -- the sessions table ---------------------------------------------------------------------

function filterable(input, table) {
  const rows = [...table.querySelectorAll("tbody tr")];
  input.addEventListener("input", () => {
    const wanted = input.value.trim().toLowerCase();
    for (const row of rows) row.hidden = wanted !== "" && !row.dataset.text.includes(wanted);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("timeline");
  if (box) watchTimeline(box);
  document.querySelectorAll("details.expand").forEach(expandable);
  document.querySelectorAll("[data-include]").forEach(include);
  const filter = document.getElementById("filter");
  const sessions = document.getElementById("sessions");
  if (filter && sessions) filterable(filter, sessions);
});
