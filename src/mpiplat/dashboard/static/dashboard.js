// mpiplat dashboard: tabs, the logs' live stream (ordered by time, searchable), and leaving a deleted job's page.
"use strict";

// A refused action's answer (403, 409) is an alert to show, not an error to drop.
htmx.config.responseHandling = [{code: "204", swap: false}, {code: "[2345]..", swap: true}];

function showTab(name) {
  document.querySelectorAll(".pf-v6-c-tabs__item").forEach((li) => {
    const on = li.querySelector("[data-tab]").dataset.tab === name;
    li.classList.toggle("pf-m-current", on);
    li.querySelector("[data-tab]").setAttribute("aria-selected", on ? "true" : "false");
  });
  document.querySelectorAll(".tab-panel").forEach((p) => { p.hidden = p.dataset.panel !== name; });
  const url = new URL(window.location);
  url.searchParams.set("tab", name);
  history.replaceState(null, "", url);
  if (name === "logs") startLogs();
}

let logSource = null;

function startLogs() {
  const box = document.getElementById("logs");
  if (!box || logSource) return;
  const state = document.getElementById("log-state");
  const search = document.getElementById("log-search");
  logSource = new EventSource(box.dataset.stream);
  logSource.addEventListener("line", (ev) => {
    const line = JSON.parse(ev.data);
    const row = document.createElement("div");
    row.className = "log-line";
    row.dataset.t = line.t;
    row.dataset.pod = line.pod;
    row.textContent = `${line.t.slice(11, 23)} ${line.pod} | ${line.text}`;
    row.hidden = !!search.value && !row.textContent.toLowerCase().includes(search.value.toLowerCase());
    // Interleave the pods' lines by their timestamps: from the end back to the first older line.
    let after = box.lastElementChild;
    while (after && after.dataset.t > line.t) after = after.previousElementSibling;
    box.insertBefore(row, after ? after.nextSibling : box.firstChild);
    if (box.scrollHeight - box.scrollTop - box.clientHeight < 80) box.scrollTop = box.scrollHeight;
    state.textContent = "streaming";
  });
  logSource.addEventListener("wait", (ev) => { state.textContent = ev.data; });
  logSource.addEventListener("end", () => { state.textContent = "the job has finished: the whole log"; logSource.close(); });
  search.addEventListener("input", () => {
    const word = search.value.toLowerCase();
    box.querySelectorAll(".log-line").forEach((r) => { r.hidden = !!word && !r.textContent.toLowerCase().includes(word); });
  });
}

document.addEventListener("click", (ev) => {
  const tab = ev.target.closest("[data-tab]");
  if (tab) showTab(tab.dataset.tab);
});

document.addEventListener("DOMContentLoaded", () => {
  const current = document.querySelector(".pf-v6-c-tabs__item.pf-m-current [data-tab]");
  if (current && current.dataset.tab === "logs") startLogs();
});

document.body && document.body.addEventListener("htmx:sseMessage", (ev) => {
  if (ev.detail.type === "gone") window.location = "/jobs";
});

// A field's change has the form checked (fieldchange: the form's hx-trigger). In here, not in a trigger filter:
// the Content-Security-Policy allows no eval. The YAML box is the form's rendering, not one of its fields.
document.addEventListener("change", (ev) => {
  const form = ev.target.closest && ev.target.closest("#job-form");
  if (form && ev.target.name !== "yaml") htmx.trigger(form, "fieldchange");
});

// A field check's answer replaces the create form. One sent before a field changed since would undo that change
// (CI35, a slow host: the GPUs typed while a check was in flight reverted, and Create sent the old value): such an
// answer is dropped, and the form checked again. The YAML is the form's own rendering, not compared.
document.addEventListener("htmx:beforeSwap", (ev) => {
  const form = document.getElementById("job-form");
  if (!form || ev.detail.requestConfig.path !== "/jobs/new/check") return;
  const sent = ev.detail.requestConfig.formData;
  const now = new FormData(form);
  const changed = [...now.keys()].some((k) => k !== "yaml" && sent.get(k) !== now.get(k));
  if (changed) {
    ev.detail.shouldSwap = false;
    htmx.trigger(form, "fieldchange");
  }
});
