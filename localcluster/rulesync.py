"""The local Prometheus's rules, from the PrometheusRule objects of the cluster, as the Prometheus Operator
gives them to the Prometheus it runs: every PrometheusRule whose labels match RULE_SELECTOR (a Prometheus
resource's `ruleSelector`, here over all namespaces) becomes a rule file <namespace>-<name>.yml in the rules
directory, a file whose object is gone or no longer selected is removed, and Prometheus reloads on a change.
A host process beside the controllers (processes.CONTROLLERS): it lists the PrometheusRules, then watches them
and lists them again on the first change (or after WATCH_S; every RETRY_S while the API server or Prometheus
does not answer):

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
WATCH_S = 300  # a list at least this often, changed or not
RETRY_S = 2.0


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


RULES = ("monitoring.coreos.com", "v1", "prometheusrules")


def _list_rules(api) -> tuple[list[dict], str | None]:
    """The PrometheusRules and the list's resourceVersion (None: no PrometheusRule CRD, so no rules)."""
    from kubernetes.client.exceptions import ApiException

    try:
        listed = api.list_cluster_custom_object(*RULES)
    except ApiException as err:
        if err.status == 404:
            return [], None
        raise
    return listed["items"], listed["metadata"]["resourceVersion"]


def _wait_for_change(api, resource_version: str, timeout: float) -> None:
    """Until a PrometheusRule changes after `resource_version` (any event, an expired version's error included),
    or `timeout` seconds."""
    from kubernetes import watch

    stream = watch.Watch()
    try:
        for _event in stream.stream(api.list_cluster_custom_object, *RULES, resource_version=resource_version,
                                    timeout_seconds=int(timeout), _request_timeout=timeout + 30):
            break
    finally:
        stream.stop()


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
    reload_pending, version = False, None
    while True:
        try:
            rules, version = _list_rules(api)
            reload_pending |= write(args.rules_dir, selected(rules, RULE_SELECTOR))
            _Health.ok = True
        except Exception as err:  # noqa: BLE001 (keep serving: the API server may be restarting)
            print(f"rulesync: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            _Health.ok, version = False, None
        if reload_pending and _reload(args.prometheus):
            print(f"rulesync: Prometheus reloaded {sorted(p.name for p in args.rules_dir.glob('*.yml'))}", flush=True)
            reload_pending = False
        if version is None or reload_pending:
            time.sleep(RETRY_S)
            continue
        try:
            _wait_for_change(api, version, WATCH_S)
        except Exception as err:  # noqa: BLE001 (a broken watch: list again)
            print(f"rulesync: watch: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            time.sleep(RETRY_S)


if __name__ == "__main__":
    sys.exit(main())
