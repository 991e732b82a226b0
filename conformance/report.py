"""Conformance reports: JSON (every figure), JUnit XML (one testcase per requirement), Markdown,
one self-contained HTML file, and a CNCF-AI-conformance-style checklist."""

from __future__ import annotations

import html
import json
import time
from dataclasses import asdict
from pathlib import Path
from xml.etree import ElementTree as ET

import yaml

CATALOG = yaml.safe_load((Path(__file__).with_name("catalog.yml")).read_text())["requirements"]
ORDER = {"passed": 0, "failed": 1, "skipped": 2}


def aggregate(outcomes: list[dict]) -> dict[str, dict]:
    """Per requirement: failed if any test failed, passed if any passed and none failed, else skipped."""
    reqs: dict[str, dict] = {}
    for o in outcomes:
        r = reqs.setdefault(o["requirement"], {"tests": [], "duration_s": 0.0})
        r["tests"].append(o)
        r["duration_s"] += o["duration_s"]
    for r in reqs.values():
        states = {t["status"] for t in r["tests"]}
        r["status"] = "failed" if "failed" in states else "passed" if "passed" in states else "skipped"
        r["message"] = next((t["message"] for t in r["tests"] if t["status"] == r["status"] and t["message"]), "")
        r["diagnosis"] = next((t.get("diagnosis", "") for t in r["tests"] if t.get("diagnosis")), "")
    return dict(sorted(reqs.items()))


def write(report_dir: Path, outcomes: list[dict], figures: list, meta: dict, plots: list[dict] = ()) -> dict:
    """plots: {"requirement", "title", "svg"} each, drawn into the HTML and saved as plot-<n>.svg."""
    report_dir.mkdir(parents=True, exist_ok=True)
    reqs = aggregate(outcomes)
    counts = {s: sum(1 for r in reqs.values() if r["status"] == s) for s in ORDER}
    saved = []
    for n, plot in enumerate(plots, start=1):
        (report_dir / f"plot-{n}.svg").write_text(plot["svg"])
        saved.append({"requirement": plot["requirement"], "title": plot["title"], "file": f"plot-{n}.svg"})
    data = {"meta": meta, "summary": counts, "requirements": reqs,
            "figures": [asdict(f) | {"meets_target": f.meets_target} for f in figures], "plots": saved}
    (report_dir / "results.json").write_text(json.dumps(data, indent=2, default=str))
    _junit(report_dir / "junit.xml", reqs, meta)
    md = _markdown(data)
    (report_dir / "report.md").write_text(md)
    (report_dir / "report.html").write_text(_html(data, [p["svg"] for p in plots]))
    (report_dir / "checklist.md").write_text(_checklist(data))
    return data


def _junit(path: Path, reqs: dict, meta: dict) -> None:
    suite = ET.Element("testsuite", name="mpiplat-conformance", tests=str(len(reqs)),
                       failures=str(sum(r["status"] == "failed" for r in reqs.values())),
                       skipped=str(sum(r["status"] == "skipped" for r in reqs.values())),
                       time=f"{meta.get('duration_s', 0):.1f}")
    for rid, r in reqs.items():
        case = ET.SubElement(suite, "testcase", classname="mpiplat.conformance", name=rid,
                             time=f"{r['duration_s']:.2f}")
        if r["status"] == "failed":
            ET.SubElement(case, "failure", message=r["message"][:500]).text = r["message"]
        elif r["status"] == "skipped":
            ET.SubElement(case, "skipped", message=r["message"][:500])
    root = ET.Element("testsuites", name="mpiplat")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="unicode", xml_declaration=True)


def _fmt_target(f: dict) -> str:
    if f["target"] is None:
        return "reported"
    op = "<=" if f["better"] == "lower" else ">="
    return f"{op} {f['target']} {f['unit']}".strip()


def cluster_name(meta: dict) -> str:
    """The cluster as a report names it: API server URL, server version, context."""
    c = meta.get("cluster") or {}
    if not isinstance(c, dict):
        return str(c)
    return f"{c.get('server', '?')} (Kubernetes {c.get('version', '?')}, context {c.get('context') or '-'})"


def _markdown(data: dict) -> str:
    m, s = data["meta"], data["summary"]
    lines = [f"# MPI training conformance report: {cluster_name(m)}", "",
             f"- run {m.get('run_id')} on {m.get('started')}, profile `{m.get('profile')}`, "
             f"duration {m.get('duration_s', 0):.0f} s",
             f"- capabilities: {', '.join(f'{k}={v}' for k, v in m.get('capabilities', {}).items())}",
             f"- **{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped**", "",
             "| id | requirement | status | details |", "|---|---|---|---|"]
    for rid, r in data["requirements"].items():
        title = CATALOG.get(rid, {}).get("title", "")
        detail = r["message"].splitlines()[0][:160] if r["message"] else ""
        if r["status"] == "failed":
            detail = f"[diagnosis](#diagnosis-{rid.lower()}) {detail}"
        lines.append(f"| {rid} | {title} | {r['status'].upper()} | {detail} |")
    lines += ["", "## Figures against targets", "", "| id | figure | value | target | meets |", "|---|---|---|---|---|"]
    for f in data["figures"]:
        meets = "" if f["meets_target"] is None else ("yes" if f["meets_target"] else "**no**")
        lines.append(f"| {f['requirement']} | {f['name']} | {f['value']} {f['unit']} | {_fmt_target(f)} | {meets} |")
    if data["plots"]:
        lines += ["", "## Plots", ""] + [f"- {p['requirement']}: [{p['title']}]({p['file']})" for p in data["plots"]]
    failed = [(rid, r) for rid, r in data["requirements"].items() if r["status"] == "failed"]
    if failed:
        lines += ["", "## Diagnoses", ""]
        for rid, r in failed:
            lines += [f"### Diagnosis {rid}", "", "```", (r["diagnosis"] or r["message"]).strip(), "```", ""]
    return "\n".join(lines) + "\n"


def _html(data: dict, svgs: list[str]) -> str:
    m, s = data["meta"], data["summary"]
    color = {"passed": "#1a7f37", "failed": "#cf222e", "skipped": "#9a6700"}
    rows = []
    for rid, r in data["requirements"].items():
        link = f' <a href="#diag-{rid}">diagnosis</a>' if r["status"] == "failed" else ""
        msg = html.escape(r["message"].splitlines()[0][:200]) if r["message"] else ""
        rows.append(f"<tr><td>{rid}</td><td>{html.escape(CATALOG.get(rid, {}).get('title', ''))}</td>"
                    f"<td style='color:{color[r['status']]};font-weight:bold'>{r['status'].upper()}</td>"
                    f"<td>{msg}{link}</td></tr>")
    figs = []
    for f in data["figures"]:
        meets = "" if f["meets_target"] is None else ("yes" if f["meets_target"] else "<b>no</b>")
        figs.append(f"<tr><td>{f['requirement']}</td><td>{html.escape(f['name'])}</td>"
                    f"<td>{f['value']} {html.escape(f['unit'])}</td><td>{html.escape(_fmt_target(f))}</td>"
                    f"<td>{meets}</td></tr>")
    diags = "".join(f"<h3 id='diag-{rid}'>Diagnosis {rid}</h3><pre>{html.escape(r['diagnosis'] or r['message'])}</pre>"
                    for rid, r in data["requirements"].items() if r["status"] == "failed")
    extra = "".join(f"<h2>{html.escape(p['requirement'])}: {html.escape(p['title'])}</h2>{svg}"
                    for p, svg in zip(data["plots"], svgs, strict=True))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>mpiplat conformance</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;
padding:4px 8px;text-align:left}}pre{{background:#f6f8fa;padding:1em}}</style></head><body>
<h1>MPI training conformance report: {html.escape(cluster_name(m))}</h1>
<p>Run {html.escape(str(m.get('run_id')))} on {html.escape(str(m.get('started')))}, profile
<code>{html.escape(str(m.get('profile')))}</code>, duration {m.get('duration_s', 0):.0f} s.
<b>{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped.</b></p>
<h2>Requirements</h2><table><tr><th>id</th><th>requirement</th><th>status</th><th>details</th></tr>{''.join(rows)}</table>
<h2>Figures against targets</h2><table><tr><th>id</th><th>figure</th><th>value</th><th>target</th><th>meets</th></tr>
{''.join(figs)}</table>{extra}{('<h2>Diagnoses</h2>' + diags) if diags else ''}
</body></html>
"""


def _checklist(data: dict) -> str:
    lines = ["# Conformance checklist (CNCF AI conformance style)", "",
             "| id | requirement | status | evidence |", "|---|---|---|---|"]
    for rid, r in data["requirements"].items():
        evidence = "; ".join(f"{f['name']}={f['value']}{f['unit']}" for f in data["figures"] if f["requirement"] == rid)
        evidence = evidence or ", ".join(t["name"] for t in r["tests"])
        mark = {"passed": "Implemented", "failed": "Not met", "skipped": "N/A"}[r["status"]]
        lines.append(f"| {rid} | {CATALOG.get(rid, {}).get('title', '')} | {mark} | {evidence} |")
    return "\n".join(lines) + "\n"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
