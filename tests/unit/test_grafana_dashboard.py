"""deploy/grafana/router.json: a Grafana dashboard over the router's metrics. It must parse, and every
expression must name metrics the router's processes export (the job's `streaming.spark.metrics.METRICS`
and the services' in `streaming.observe`), so that a renamed metric cannot leave a dashboard panel
empty without a test failing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from streaming.endpoint import metrics as endpoint_metrics
from streaming.observe import ddr_metrics, directory_metrics
from streaming.spark import metrics as job_metrics

METRICS = {
    **job_metrics.METRICS,
    **endpoint_metrics.METRICS,
    **directory_metrics.METRICS,
    **ddr_metrics.METRICS,
}

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "router.json"
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel (a row holds no query)."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    ]


def metric_names(expr: str) -> set[str]:
    """The router metrics an expression reads (a histogram's series named as the histogram)."""
    names = set(re.findall(r"\brouter_[a-z_]+\b", expr))
    out = set()
    for name in names:
        for suffix in HISTOGRAM_SERIES:
            if name.endswith(suffix) and name.removesuffix(suffix) in METRICS:
                name = name.removesuffix(suffix)
        out.add(name)
    return out


def test_the_dashboard_parses_and_every_expression_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = expressions(dashboard)
    assert found, "the dashboard has panels with queries"
    unknown = {(title, name) for title, expr in found for name in metric_names(expr) if name not in METRICS}
    assert not unknown, f"expressions name metrics the router does not export: {sorted(unknown)}"
    for title, expr in found:
        assert metric_names(expr), f"{title}: {expr} reads no router metric"
        assert expr.count("(") == expr.count(")"), f"{title}: unbalanced parentheses in {expr}"


def test_the_dashboard_shows_what_an_operator_alerts_on() -> None:
    """Issue 42: routed by outcome, delayed backlog and oldest, dead letters, lag, batch duration,
    destinations unavailable."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    read = set().union(*(metric_names(expr) for _, expr in expressions(dashboard)))
    wanted = {
        "router_messages_total",
        "router_delayed_messages",
        "router_delayed_oldest_seconds",
        "router_deadletter_total",
        "router_input_lag_records",
        "router_batch_duration_seconds",
        "router_destination_unavailable_total",
    }
    assert wanted <= read, wanted - read
    services = {"router_endpoint_unacknowledged_messages", "router_endpoint_resent_total"}
    assert services <= read, services - read
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
