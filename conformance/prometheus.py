"""The suite's reading of a Prometheus through its HTTP API (settings `prometheus`): instant queries, the
samples of a range selector, alerts, alerting rules and scrape targets."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from mpiplat.errors import MpiplatError

EVALUATION_SLACK_S = 5  # beyond a rule group's interval, for its first evaluation to show in the API


class PrometheusError(MpiplatError, RuntimeError):
    """Prometheus did not answer, or refused a query; the message says which and why."""


@dataclass(frozen=True)
class Prometheus:
    url: str
    token: str | None = None
    ca_file: str | None = None

    @classmethod
    def from_settings(cls, conf: dict) -> Prometheus | None:
        """The settings' `prometheus` ({url, token_file, ca_file}), or None where it has no url."""
        if not conf.get("url"):
            return None
        token = None
        if conf.get("token_file"):
            try:
                token = Path(conf["token_file"]).read_text().strip()
            except OSError as err:
                raise PrometheusError(f"settings field prometheus.token_file: cannot read {conf['token_file']}: "
                                      f"{err.strerror}") from err
        return cls(conf["url"].rstrip("/"), token, conf.get("ca_file"))

    def _get(self, path: str, **params: str) -> dict | list:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        req = urllib.request.Request(f"{self.url}{path}{query}")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        ctx = ssl.create_default_context(cafile=self.ca_file) if self.url.startswith("https") else None
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:300]
            raise PrometheusError(f"Prometheus at {self.url} refused {path} (HTTP {err.code}): {detail}") from err
        except (OSError, ValueError) as err:
            raise PrometheusError(f"Prometheus at {self.url} does not answer {path}: {err}") from err
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus at {self.url}: {path} failed: {body.get('errorType')}: "
                                  f"{body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        """An instant query's result: [{metric: {labels}, value: [time, "value"]}] for a vector."""
        return self._get("/api/v1/query", query=promql)["result"]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        """A range query's matrix: [{metric: {labels}, values: [[time, "value"], ...]}]."""
        return self._get("/api/v1/query_range", query=promql, start=f"{start:.3f}", end=f"{end:.3f}",
                         step=f"{max(step, 1):.0f}s")["result"]

    def clock_offset(self) -> float:
        """Its clock less ours, in seconds (the middle of the call on ours), to compare its timestamps."""
        before = time.time()
        server = float(self._get("/api/v1/query", query="time()")["result"][1])
        return server - (before + time.time()) / 2

    def samples(self, selector: str, window: str) -> list[list[tuple[float, float]]]:
        """The (time, value) samples of `selector`[window], a list per series, oldest first."""
        return [[(float(t), float(v)) for t, v in s["values"]] for s in self.query(f"{selector}[{window}]")]

    def alerts(self) -> list[dict]:
        """The active alerts: [{labels, state (pending or firing), activeAt, ...}]."""
        return self._get("/api/v1/alerts")["alerts"]

    def alerting_rules(self) -> dict[str, dict]:
        """The loaded alerting rules by name, each with its query, duration, health, last evaluation and its group's
        evaluation `interval` (s)."""
        return {r["name"]: {**r, "interval": g["interval"]} for g in self._get("/api/v1/rules")["groups"]
                for r in g["rules"] if r.get("type") == "alerting"}

    def evaluated_alerting_rules(self, names: list[str]) -> dict[str, dict]:
        """alerting_rules(), once those of `names` that are loaded have been evaluated: a rule loaded a moment ago
        (an install just before) has health `unknown` until its group's first evaluation, an interval later."""
        rules, until = self.alerting_rules(), None
        while unknown := [rules[n]["interval"] for n in names if rules.get(n, {}).get("health") == "unknown"]:
            until = until or time.monotonic() + max(unknown) + EVALUATION_SLACK_S
            if time.monotonic() > until:
                break
            time.sleep(0.5)
            rules = self.alerting_rules()
        return rules

    def targets(self) -> list[dict]:
        """The active scrape targets, each with its labels and health."""
        return self._get("/api/v1/targets", state="active")["activeTargets"]
