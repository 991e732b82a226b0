"""Conformance reports: JSON (every figure), JUnit XML (one testcase per requirement), Markdown, one
self-contained HTML file, a checklist, and an evidence file for the Kubernetes AI Conformance checklist
(PRODUCT.yaml style). Verdicts come from mpiplat.conformance.verdicts; each shows its status and its
evidence level."""

from __future__ import annotations

import html
import json
import time
from dataclasses import asdict
from pathlib import Path
from xml.etree import ElementTree as ET

import yaml

from mpiplat.conformance import verdicts
from mpiplat.conformance.catalog import AI_CONFORMANCE
from mpiplat.conformance.catalog import REQUIREMENTS as CATALOG

LEVEL_MEANS = {
    "real": "real pods and network",
    "simulated": "on KWOK nodes: the API server and controllers are real, the pods are not",
    "objects": "API objects and the API server's answers; the behaviour was not exercised by pods",
    "none": "not shown: every test skipped, or none ran",
}
AI_FILE = "ai-conformance.yaml"


def write(report_dir: Path, outcomes: list[dict], figures: list, meta: dict, plots: list[dict] = (),
          loosened: list[dict] = (), cluster: dict | None = None, not_run: dict[str, str] | None = None) -> dict:
    """Write every report into report_dir and return what results.json holds; its "files" lists what was
    written. plots: {"requirement", "title", "svg"} each, drawn into the HTML and saved as plot-<n>.svg.
    loosened: catalog.loosened(settings.thresholds). cluster: snapshot.cluster, saved as cluster.json.
    not_run: {id: why} for the catalog's rows no test ran for (verdicts.aggregate lists them)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    reqs = verdicts.aggregate(outcomes, loosened, not_run)
    files = []
    saved = []
    for n, plot in enumerate(plots, start=1):
        (report_dir / f"plot-{n}.svg").write_text(plot["svg"])
        saved.append({"requirement": plot["requirement"], "title": plot["title"], "file": f"plot-{n}.svg"})
        files.append(f"plot-{n}.svg")
    if cluster is not None:
        (report_dir / "cluster.json").write_text(json.dumps(cluster, indent=2, default=str))
        files.append("cluster.json")
        meta = {**meta, "nodes": cluster["node_summary"], "controllers": cluster["controllers"]}
    files += ["results.json", "junit.xml", "report.md", "report.html", "checklist.md", AI_FILE]
    data = {"meta": meta, "summary": verdicts.summary(reqs), "by_evidence": verdicts.by_evidence(reqs),
            "loosened": list(loosened), "requirements": reqs,
            "figures": [asdict(f) | {"meets_target": f.meets_target} for f in figures], "plots": saved,
            "files": files}
    data["ai_checklist"] = meta.get("ai_checklist") or AI_CONFORMANCE["checklist"]
    data["ai_conformance"] = ai_conformance(data, data["ai_checklist"])
    (report_dir / "results.json").write_text(json.dumps(data, indent=2, default=str))
    _junit(report_dir / "junit.xml", reqs, meta)
    (report_dir / "report.md").write_text(_markdown(data))
    (report_dir / "report.html").write_text(_html(data, [p["svg"] for p in plots]))
    (report_dir / "checklist.md").write_text(_checklist(data))
    (report_dir / AI_FILE).write_text(_ai_yaml(data))
    return data


# ---------------------------------------------------------------- shared wording

def cluster_name(meta: dict) -> str:
    """The cluster as a report names it: API server URL, server version, context."""
    c = meta.get("cluster") or {}
    if not isinstance(c, dict):
        return str(c)
    return f"{c.get('server', '?')} (Kubernetes {c.get('version', '?')}, context {c.get('context') or '-'})"


def _nodes(meta: dict) -> str:
    n = meta.get("nodes")
    if not n:
        return "not read"
    kubelets = f", kubelet {', '.join(n['kubelets'])}" if n.get("kubelets") else ""
    return (f"{n['real']} real ({n['gpus_real']} GPUs{kubelets}), {n['simulated']} simulated by KWOK "
            f"({n['gpus_simulated']} GPUs)")


def _controllers(meta: dict) -> str:
    found = meta.get("controllers")
    if found is None:
        return "not read"
    if not found:
        return "no Deployment, DaemonSet or StatefulSet of the stack (controllers may run outside the cluster)"
    return "; ".join(f"{c['component']}: {', '.join(c['images'])} ({c['ready']} ready)" for c in found)


def _counts(s: dict) -> str:
    return ", ".join(f"{s[k]} {k}" for k in verdicts.STATUSES)


def _first_line(text: str, width: int) -> str:
    return text.splitlines()[0][:width] if text else ""


def _fmt_target(f: dict) -> str:
    if f["target"] is None:
        return "reported"
    op = "<=" if f["better"] == "lower" else ">="
    return f"{op} {f['target']} {f['unit']}".strip()


def _identity_rows(data: dict) -> list[tuple[str, str]]:
    m = data["meta"]
    c = m.get("cluster") or {}
    return [("API server", str(c.get("server", "?"))), ("Kubernetes", str(c.get("version", "?"))),
            ("context", str(c.get("context") or "-")), ("nodes", _nodes(m)), ("controllers", _controllers(m)),
            ("run", f"{m.get('run_id')} on {m.get('started')}, profile {m.get('profile')}"
                    + (f" --phase {m['phase']}" if m.get("phase") else "") + ", "
                    f"{m.get('duration_s', 0):.0f} s"),
            ("settings", str(m.get("settings", "-"))),
            ("waits", f"x{m['wait_scale']:g} (timeouts.wait_scale)" if "wait_scale" in m else "-"),
            ("thresholds not the catalog's", ", ".join(d["text"] for d in m.get("differing", [])) or "none"),
            ("capabilities", ", ".join(f"{k}={v}" for k, v in (m.get("capabilities") or {}).items()) or "-")]


# ---------------------------------------------------------------- JUnit

def _junit(path: Path, reqs: dict, meta: dict) -> None:
    """One testcase per requirement; its properties carry status (partial too), evidence and each test's."""
    suite = ET.Element("testsuite", name="mpiplat-conformance", tests=str(len(reqs)),
                       failures=str(sum(r["status"] == "failed" for r in reqs.values())),
                       skipped=str(sum(r["status"] in ("skipped", "not run") for r in reqs.values())),
                       time=f"{meta.get('duration_s', 0):.1f}")
    for rid, r in reqs.items():
        case = ET.SubElement(suite, "testcase", classname="mpiplat.conformance", name=rid,
                             time=f"{r['duration_s']:.2f}")
        props = ET.SubElement(case, "properties")
        pairs = [("status", r["status"]), ("evidence", r["evidence"] or "none")]
        pairs += [("loosened", text) for text in r["loosened"]]
        pairs += [("partial", note) for note in (r["notes"] if r["status"] == "partial" else [])]
        pairs += [(f"test:{t['name']}", f"{t['status']} {t.get('evidence') or 'none'}") for t in r["tests"]]
        for key, value in pairs:
            ET.SubElement(props, "property", name=key, value=value)
        if r["status"] == "failed":
            ET.SubElement(case, "failure", message=r["message"][:500]).text = r["diagnosis"] or r["message"]
        elif r["status"] in ("skipped", "not run"):
            ET.SubElement(case, "skipped", message=r["message"][:500])
        elif r["status"] == "partial":
            ET.SubElement(case, "system-out").text = "partial: " + r["message"]
    root = ET.Element("testsuites", name="mpiplat")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="unicode", xml_declaration=True)


# ---------------------------------------------------------------- Markdown

def _markdown(data: dict) -> str:
    lines = [f"# MPI training conformance report: {cluster_name(data['meta'])}", ""]
    lines += [f"- {k}: {v}" for k, v in _identity_rows(data)]
    lines += ["", f"**Requirements: {_counts(data['summary'])}.**", "", "## By evidence level", "",
              "| evidence | " + " | ".join(verdicts.STATUSES) + " | means |",
              "|---|" + "---|" * len(verdicts.STATUSES) + "---|"]
    for level, counts in data["by_evidence"].items():
        lines.append(f"| {level} | " + " | ".join(str(counts[s]) for s in verdicts.STATUSES)
                     + f" | {LEVEL_MEANS[level]} |")
    if data["loosened"]:
        lines += ["", "## Thresholds looser than the catalog's", "",
                  "The settings chose these; the rows they serve are at best partial.", ""]
        lines += [f"- {lo['text']} ({', '.join(lo['rows'])})" for lo in data["loosened"]]
    lines += ["", "## Requirements", "", "| id | requirement | status | evidence | details |", "|---|---|---|---|---|"]
    for rid, r in data["requirements"].items():
        title = CATALOG.get(rid, {}).get("title", "")
        detail = _first_line(r["message"], 160)
        if r["status"] == "failed":
            detail = f"[diagnosis](#diagnosis-{rid.lower()}) {detail}"
        lines.append(f"| {rid} | {title} | {r['status'].upper()} | {r['evidence'] or '-'} | {detail} |")
    lines += ["", "## Figures against targets", "", "| id | figure | value | target | meets |", "|---|---|---|---|---|"]
    for f in data["figures"]:
        meets = "" if f["meets_target"] is None else ("yes" if f["meets_target"] else "**no**")
        lines.append(f"| {f['requirement']} | {f['name']} | {f['value']} {f['unit']} | {_fmt_target(f)} | {meets} |")
    if data["plots"]:
        lines += ["", "## Plots", ""] + [f"- {p['requirement']}: [{p['title']}]({p['file']})" for p in data["plots"]]
    lines += ["", f"## Kubernetes AI Conformance ({data['ai_checklist']}, also in {AI_FILE})", "",
              "| requirement | level | status | evidence | our rows |", "|---|---|---|---|---|"]
    for item in (i for i in data["ai_conformance"] if i["rows"]):
        rows = ", ".join(f"{r['id']} {r['status']}" for r in item["rows"])
        lines.append(f"| {item['id']} | {item['level']} | {item['status']} | {item['evidenceLevel'] or '-'} | {rows} |")
    failed = [(rid, r) for rid, r in data["requirements"].items() if r["status"] == "failed"]
    if failed:
        lines += ["", "## Diagnoses", ""]
        for rid, r in failed:
            lines += [f"### Diagnosis {rid}", "", "```", (r["diagnosis"] or r["message"]).strip(), "```", ""]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- HTML

COLOR = {"passed": "#1a7f37", "partial": "#9a6700", "failed": "#cf222e", "skipped": "#6e7781", "not run": "#6e7781"}
STYLE = """body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin-bottom:1em}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
pre{background:#f6f8fa;padding:1em;white-space:pre-wrap}.identity th{width:9em}.num{text-align:right}
td:first-child{white-space:nowrap}"""


def _e(value) -> str:
    return html.escape(str(value))


def _status(status: str) -> str:
    return f"<span style='color:{COLOR[status]};font-weight:bold'>{status.upper()}</span>"


def _html(data: dict, svgs: list[str]) -> str:
    identity = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in _identity_rows(data))
    head = "".join(f"<th>{s}</th>" for s in verdicts.STATUSES)
    levels = "".join(f"<tr><td><b>{lv}</b></td>" + "".join(f"<td class=num>{c[s]}</td>" for s in verdicts.STATUSES)
                     + f"<td>{_e(LEVEL_MEANS[lv])}</td></tr>" for lv, c in data["by_evidence"].items())
    loose = ""
    if data["loosened"]:
        loose = ("<h2>Thresholds looser than the catalog's</h2><p>The settings chose these; the rows they serve "
                 "are at best partial.</p><ul>" + "".join(f"<li>{_e(lo['text'])} ({_e(', '.join(lo['rows']))})</li>"
                                                          for lo in data["loosened"]) + "</ul>")
    rows = []
    for rid, r in data["requirements"].items():
        link = f' <a href="#diag-{rid}">diagnosis</a>' if r["status"] == "failed" else ""
        rows.append(f"<tr id='req-{rid}'><td>{rid}</td><td>{_e(CATALOG.get(rid, {}).get('title', ''))}</td>"
                    f"<td>{_status(r['status'])}</td><td>{r['evidence'] or '-'}</td>"
                    f"<td>{_e(_first_line(r['message'], 200))}{link}</td></tr>")
    figs = []
    for f in data["figures"]:
        meets = "" if f["meets_target"] is None else ("yes" if f["meets_target"] else "<b>no</b>")
        figs.append(f"<tr><td>{f['requirement']}</td><td>{_e(f['name'])}</td><td>{f['value']} {_e(f['unit'])}</td>"
                    f"<td>{_e(_fmt_target(f))}</td><td>{meets}</td></tr>")
    ai = "".join(f"<tr><td>{_e(i['id'])}</td><td>{i['level']}</td><td>{_e(i['status'])}</td>"
                 f"<td>{i['evidenceLevel'] or '-'}</td><td>"
                 + ", ".join((f"<a href='#req-{r['id']}'>{r['id']}</a>" if r["status"] in verdicts.STATUSES
                              else r["id"]) + f" {r['status']}" for r in i["rows"])
                 + "</td></tr>" for i in data["ai_conformance"] if i["rows"])
    diags = "".join(f"<h3 id='diag-{rid}'>Diagnosis {rid}</h3><pre>{_e(r['diagnosis'] or r['message'])}</pre>"
                    for rid, r in data["requirements"].items() if r["status"] == "failed")
    extra = "".join(f"<h2>{_e(p['requirement'])}: {_e(p['title'])}</h2>{svg}"
                    for p, svg in zip(data["plots"], svgs, strict=True))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>mpiplat conformance: {_e(
        (data['meta'].get('cluster') or {}).get('server', ''))}</title>
<style>{STYLE}</style></head><body>
<h1>MPI training conformance report</h1>
<table class=identity>{identity}</table>
<p><b>Requirements: {_e(_counts(data['summary']))}.</b></p>
<h2>By evidence level</h2>
<table><tr><th>evidence</th>{head}<th>means</th></tr>{levels}</table>
{loose}
<h2>Requirements</h2><table><tr><th>id</th><th>requirement</th><th>status</th><th>evidence</th><th>details</th></tr>
{''.join(rows)}</table>
<h2>Figures against targets</h2><table><tr><th>id</th><th>figure</th><th>value</th><th>target</th><th>meets</th></tr>
{''.join(figs)}</table>{extra}
<h2>Kubernetes AI Conformance ({_e(data['ai_checklist'])}, also in {AI_FILE})</h2>
<table><tr><th>requirement</th><th>level</th><th>status</th><th>evidence</th><th>our rows</th></tr>{ai}</table>
{('<h2>Diagnoses</h2>' + diags) if diags else ''}
</body></html>
"""


# ---------------------------------------------------------------- checklist and AI conformance

def _checklist(data: dict) -> str:
    lines = ["# Conformance checklist", "",
             "| id | requirement | status | evidence level | evidence |", "|---|---|---|---|---|"]
    for rid, r in data["requirements"].items():
        shown = "; ".join(f"{f['name']}={f['value']}{f['unit']}" for f in data["figures"] if f["requirement"] == rid)
        shown = shown or ", ".join(f"{t['name']} ({t['status']})" for t in r["tests"])
        mark = {"passed": "Implemented" if r["evidence"] == "real" else f"Passed, shown {r['evidence']} only",
                "partial": "Partially implemented", "failed": "Not met", "skipped": "Not shown",
                "not run": "Not run"}[r["status"]]
        lines.append(f"| {rid} | {CATALOG.get(rid, {}).get('title', '')} | {mark} | {r['evidence'] or '-'} | {shown} |")
    return "\n".join(lines) + "\n"


UNMAPPED = "not among the requirements the mpiplat catalog shows (MPI training): the platform owner's to answer"


def ai_conformance(data: dict, checklist: str | None = None) -> list[dict]:
    """Each requirement of the AI-conformance `checklist` (default the catalog's), in its order. Those our
    rows show (the catalog's ai_conformance.requirements) get a status from the rows' verdicts:
    Not Implemented if a row failed; Implemented if every row passed with real pods; N/A if none passed or
    is partial (skipped, not run, or a part no test checks; notes say which); else Partially Implemented,
    its notes first saying what was shown where every row passed below `real`.
    evidenceLevel: the weakest level of the rows that passed or are partial; evidence: each row's testcase in
    junit.xml and section of report.html. The others have no status and say why (UNMAPPED)."""
    out = []
    for category, levels in AI_CONFORMANCE["checklists"][checklist or AI_CONFORMANCE["checklist"]].items():
        for ai_id, level in levels.items():
            spec = AI_CONFORMANCE["requirements"].get(ai_id)
            out.append(_ai_item(data, ai_id, spec) if spec else
                       {"id": ai_id, "category": category, "description": "", "level": level, "status": "",
                        "evidenceLevel": None, "evidence": [], "notes": UNMAPPED, "rows": []})
    return out


def _ai_item(data: dict, ai_id: str, spec: dict) -> dict:
    """One requirement our rows show (see ai_conformance)."""
    rows = []
    for rid, part in spec["rows"].items():
        r = data["requirements"].get(rid)
        part, unchecked = (part["part"], part.get("unchecked")) if isinstance(part, dict) else (part, None)
        if unchecked:
            rows.append({"id": rid, "part": part, "status": "not checked", "evidence": None, "message": unchecked})
            continue
        rows.append({"id": rid, "part": part, "status": r["status"] if r else "not run",
                     "evidence": r["evidence"] if r else None,
                     "message": _first_line(r["message"], 200) if r else "not in this run"})
    states = {r["status"] for r in rows}
    shown = [r["evidence"] for r in rows if r["status"] in ("passed", "partial") and r["evidence"]]
    weakest = min(shown, key=verdicts.LEVELS.index) if shown else None
    below_real = ""
    if "failed" in states:
        status = "Not Implemented"
    elif states == {"passed"} and weakest == "real":
        status = "Implemented"
    elif states & {"passed", "partial"}:
        status = "Partially Implemented"
        if states == {"passed"}:
            below_real = f"every row passed, shown {weakest} only (Implemented needs real pods); "
    else:
        status = "N/A"
    notes = below_real + "; ".join(f"{r['id']} ({r['part']}): {r['status']}"
                                   + (f", {r['evidence']}" if r["evidence"] else "")
                                   + (f": {r['message']}" if r["message"] and r["status"] != "passed" else "")
                                   for r in rows)
    return {"id": ai_id, "category": spec["category"], "description": spec["description"], "level": spec["level"],
            "status": status, "evidenceLevel": weakest,
            "evidence": [f"file://{name}#{anchor}{r['id']}" for r in rows if r["status"] in verdicts.STATUSES
                         for name, anchor in (("junit.xml", ""), ("report.html", "req-"))],
            "notes": notes, "rows": rows}


def _ai_yaml(data: dict) -> str:
    m = data["meta"]
    c = m.get("cluster") or {}
    version = str(c.get("version") or "")
    spec: dict[str, list] = {}
    for item in data["ai_conformance"]:
        spec.setdefault(item["category"], []).append(
            {k: item[k] for k in ("id", "description", "level", "status", "evidence", "notes")}
            | {"evidenceLevel": item["evidenceLevel"],
               "mpiplatRows": [{k: r[k] for k in ("id", "part", "status", "evidence")} for r in item["rows"]]})
    doc = {"metadata": {"kubernetesVersion": ".".join(version.split(".")[:2]) or None,
                        "platformVersion": version or None, "apiServer": c.get("server"),
                        "context": c.get("context")},
           "mpiplat": {"checklist": data["ai_checklist"], "run": m.get("run_id"), "started": m.get("started"),
                       "profile": m.get("profile"), "report": "report.html"},
           "spec": spec}
    head = (f"# Kubernetes AI Conformance evidence (PRODUCT.yaml style) from one mpiplat conformance run, answering\n"
            f"# the {data['ai_checklist']} checklist (mpiplat.checklist); evidence points at junit.xml's testcases.\n"
            "# status: from the verdicts of the rows in mpiplatRows; evidenceLevel: the weakest level those rows\n"
            "# showed (real > simulated > objects). The vendor fields of a PRODUCT.yaml (platformName, vendorName,\n"
            "# websiteUrl, ...) are the platform owner's to add.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=120)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
