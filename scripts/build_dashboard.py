"""Write deploy/grafana/dashboards/eaglefeed.json from the panel list below (deterministic)."""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "dashboards" / "eaglefeed.json"

# (title, unit, [(legend, PromQL)], panel type)
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]], str]]]] = [
    ("Throughput", [
        ("Prompts in / generations out", "ops", [
            ("prompts published/s", "sum(rate(eaglefeed_producer_prompts_published_total[1m]))"),
            ("generations published/s", "sum(rate(eaglefeed_worker_records_published_total[1m]))"),
            ("training rows written/s", "sum(rate(eaglefeed_sink_rows_written_total[1m]))"),
        ], "timeseries"),
        ("Generated tokens per second", "short", [
            ("eaglefeed workers", "sum(rate(eaglefeed_worker_generated_tokens_total[1m]))"),
            ("SGLang gen_throughput", "sum(sglang:gen_throughput)"),
        ], "timeseries"),
        ("Requests in flight", "short", [
            ("records in flight (workers)", "sum(eaglefeed_worker_in_flight_records)"),
            ("SGLang running", "sum(sglang:num_running_reqs)"),
            ("SGLang queued", "sum(sglang:num_queue_reqs)"),
        ], "timeseries"),
    ]),
    ("Requests", [
        ("Requests by outcome", "reqps", [
            ("{{outcome}}", "sum by (outcome) (rate(eaglefeed_worker_requests_total[1m]))"),
        ], "timeseries"),
        ("SGLang request latency (seen by workers)", "s", [
            ("p50", "histogram_quantile(0.5, sum by (le) (rate(eaglefeed_worker_request_seconds_bucket[5m])))"),
            ("p95", "histogram_quantile(0.95, sum by (le) (rate(eaglefeed_worker_request_seconds_bucket[5m])))"),
        ], "timeseries"),
        ("Retries by reason", "reqps", [
            ("{{reason}}", "sum by (reason) (rate(eaglefeed_worker_retries_total[5m]))"),
        ], "timeseries"),
    ]),
    ("Backlog", [
        ("Lag per stage (records)", "short", [
            ("{{stage}}", "sum by (stage) (eaglefeed_consumer_lag_records)"),
        ], "timeseries"),
        ("ETA per stage", "s", [
            ("{{stage}}", "sum by (stage) (eaglefeed_consumer_lag_records) / "
                          "clamp_min(sum by (stage) (deriv(eaglefeed_consumer_committed_offset[5m])), 0.001)"),
        ], "timeseries"),
        ("Dead letters (last hour)", "short", [
            ("produce {{reason}}", "sum by (reason) (increase(eaglefeed_producer_bad_lines_total[1h]))"),
            ("generate {{reason}}", "sum by (reason) (increase(eaglefeed_worker_dead_letters_total[1h]))"),
            ("sink {{reason}}", "sum by (reason) (increase(eaglefeed_sink_dead_letters_total[1h]))"),
        ], "timeseries"),
    ]),
    ("Dataset", [
        ("Sink rows and bytes written", "short", [
            ("rows/s", "sum(rate(eaglefeed_sink_rows_written_total[1m]))"),
            ("MB/s", "sum(rate(eaglefeed_sink_bytes_written_total[1m])) / 1e6"),
        ], "timeseries"),
        ("Duplicates dropped by the sink", "short", [
            ("duplicates", "sum(eaglefeed_sink_duplicates_dropped_total)"),
        ], "stat"),
        ("SGLang KV-cache usage", "percentunit", [
            ("token_usage", "max(sglang:token_usage)"),
        ], "timeseries"),
    ]),
]


def build() -> dict:
    """The dashboard as a Grafana JSON model."""
    panels = []
    y = 0
    pid = 1
    for row_title, row_panels in ROWS:
        panels.append({"type": "row", "title": row_title, "id": pid, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid += 1
        y += 1
        for i, (title, unit, targets, kind) in enumerate(row_panels):
            panels.append({
                "type": kind, "title": title, "id": pid,
                "datasource": {"type": "prometheus", "uid": "prometheus"},
                "gridPos": {"h": 8, "w": 8, "x": 8 * i, "y": y},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [{"refId": chr(65 + j), "expr": expr, "legendFormat": legend,
                             "datasource": {"type": "prometheus", "uid": "prometheus"}}
                            for j, (legend, expr) in enumerate(targets)],
            })
            pid += 1
        y += 8
    return {"title": "eaglefeed", "uid": "eaglefeed", "schemaVersion": 39, "version": 1,
            "refresh": "10s", "time": {"from": "now-1h", "to": "now"}, "tags": ["eaglefeed"],
            "panels": panels}


if __name__ == "__main__":
    OUT.write_text(json.dumps(build(), indent=2) + "\n")
    print(f"wrote {OUT}")
