"""The local Prometheus's rules, from the PrometheusRule objects of the cluster, as the Prometheus Operator
gives them to the Prometheus it runs: every PrometheusRule whose labels match RULE_SELECTOR (a Prometheus
resource's `ruleSelector`, here over all namespaces) becomes a rule file <namespace>-<name>.yml in the rules
directory, a file whose object is gone or no longer selected is removed, and Prometheus reloads on a change.
A host process beside the controllers (processes.CONTROLLERS), polling every POLL_S seconds:

    python -m mpiplat.localcluster.rulesync --kubeconfig K --rules-dir D --prometheus URL --listen HOST:PORT

GET /healthz on HOST:PORT answers 200 while the last sync succeeded, 503 otherwise.
"""

from __future__ import annotations

import argparse
import http.server
import sys
import threading
import time
import urllib.request
from pathlib import Path

import yaml

RULE_SELECTOR = {"app.kubernetes.io/part-of": "mpiplat"}  # what the monitoring role labels its objects with
POLL_S = 2.0


def selected(rules: list[dict], selector: dict[str, str]) -> dict[str, str]:
    """Rule files (name -> text) for the PrometheusRules whose labels match `selector`."""
    files = {}
    for rule in rules:
        meta = rule["metadata"]
        labels = meta.get("labels") or {}
        if all(labels.get(k) == v for k, v in selector.items()):
            groups = (rule.get("spec") or {}).get("groups") or []
            files[f"{meta['namespace']}-{meta['name']}.yml"] = yaml.safe_dump({"groups": groups}, sort_keys=False)
    return files


def write(rules_dir: Path, files: dict[str, str]) -> bool:
    """Make the rule files of `rules_dir` exactly `files`; whether anything changed."""
    rules_dir.mkdir(parents=True, exist_ok=True)
    changed = False
    for path in rules_dir.glob("*.yml"):
        if path.name not in files:
            path.unlink()
            changed = True
    for name, text in files.items():
        path = rules_dir / name
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)  # Prometheus never reads half a file
            changed = True
    return changed


def _list_rules(api) -> list[dict]:
    from kubernetes.client.exceptions import ApiException

    try:
        return api.list_cluster_custom_object("monitoring.coreos.com", "v1", "prometheusrules")["items"]
    except ApiException as err:
        if err.status == 404:  # no PrometheusRule CRD: no rules
            return []
        raise


def _reload(prometheus: str) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{prometheus}/-/reload", method="POST"), timeout=5):
            return True
    except OSError:
        return False


class _Health(http.server.BaseHTTPRequestHandler):
    ok = False

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/healthz" and _Health.ok else 503)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--rules-dir", required=True, type=Path)
    parser.add_argument("--prometheus", required=True, help="its base URL, e.g. http://127.0.0.1:31188")
    parser.add_argument("--listen", required=True, help="HOST:PORT of /healthz")
    args = parser.parse_args(argv)
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(config_file=args.kubeconfig))
    host, port = args.listen.rsplit(":", 1)
    server = http.server.ThreadingHTTPServer((host, int(port)), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reload_pending = False
    while True:
        try:
            reload_pending |= write(args.rules_dir, selected(_list_rules(api), RULE_SELECTOR))
            _Health.ok = True
        except Exception as err:  # noqa: BLE001 (keep serving: the API server may be restarting)
            print(f"rulesync: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            _Health.ok = False
        if reload_pending and _reload(args.prometheus):
            print(f"rulesync: Prometheus reloaded {sorted(p.name for p in args.rules_dir.glob('*.yml'))}", flush=True)
            reload_pending = False
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
