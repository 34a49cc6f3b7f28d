#!/usr/bin/python3
"""The Grafana dashboard queries only metrics the daemons really export.

Runs a real pitstop-controller and pitstop-agent on loopback and four
emulated ranks through the real in-process library (rank 3 crashes, so a
PROCESS_DIED fault is opened and a hook runs), scrapes both /metrics
endpoints, then checks every query of deploy/grafana/pitstop-dashboard.json:
each pitstop_* metric it names is exported, each label it matches on or
groups by exists on that metric, and no other identifier is unknown PromQL.
Also checks the dashboard's structure (unique panel ids, datasource
variable, a refId and expr per target), that its "Migrations" row queries
every migration and policy-action metric (docs/migration.md, "Metrics"),
and, first, that the query check itself fails on a panel naming a metric
or a label the daemons do not export.
"""
import json
import os
import re
import sys
import tempfile
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_util import (Processes, free_port, http_get, parse_metrics,  # noqa: E402
                          wait_for)

PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk",
    "quantile", "count_values", "group", "by", "without", "on", "ignoring",
    "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear",
    "histogram_quantile", "abs", "ceil", "floor", "round", "clamp_min",
    "clamp_max", "label_replace", "label_join", "sort", "sort_desc", "time",
    "vector", "scalar", "absent", "changes", "resets", "avg_over_time",
    "max_over_time", "min_over_time", "sum_over_time", "count_over_time",
    "last_over_time", "label_values",
}
# Labels Prometheus adds when it scrapes; the daemons do not export them.
SCRAPE_LABELS = {"instance", "job", "namespace", "pod", "service",
                 "endpoint", "container"}


def queries(dash):
    """(where, expr) for every query in the dashboard."""
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((f"panel {p['id']} '{p['title']}' {t.get('refId')}",
                        t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append((f"variable {v['name']}", q))
    return out


def check_expr(where, expr, exported):
    errors = []
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)      # strings
    e = re.sub(r"\[[^\]]*\]", "", e)                  # ranges
    group_labels = []
    # Grafana's label_values(metric, label): the label must exist too.
    for m in re.finditer(r"label_values\(\s*([^,]+),\s*([a-zA-Z_]\w*)\s*\)", e):
        group_labels.append(m.group(2))
    e = re.sub(r"label_values\(\s*([^,]+),\s*[a-zA-Z_]\w*\s*\)", r"\1", e)
    for m in re.finditer(r"\b(by|without)\s*\(([^)]*)\)", e):
        group_labels += [l.strip() for l in m.group(2).split(",") if l.strip()]
    e = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", e)
    metrics = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{([^}]*)\})?", e):
        name, matchers = m.group(1), m.group(3)
        if re.fullmatch(r"[0-9.e]+", name) or name.startswith("__"):
            continue
        if name in PROMQL_WORDS and not matchers:
            continue
        if not name.startswith("pitstop_"):
            errors.append(f"{where}: '{name}' is neither a pitstop metric nor "
                          f"PromQL this test knows ({expr})")
            continue
        if name not in exported:
            errors.append(f"{where}: metric {name} is not exported by the "
                          f"daemons ({expr})")
            continue
        metrics.append(name)
        for lm in re.finditer(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)",
                              matchers or ""):
            label = lm.group(1)
            if label in SCRAPE_LABELS:
                continue
            if not any(label in s for s in exported[name]):
                errors.append(f"{where}: {name} has no label '{label}' ({expr})")
    for label in group_labels:
        if label in SCRAPE_LABELS:
            continue
        if not any(label in s for n in metrics for s in exported[n]):
            errors.append(f"{where}: no metric of the query has label "
                          f"'{label}' to group by ({expr})")
    if not metrics:
        errors.append(f"{where}: queries no pitstop metric ({expr})")
    return errors


def check_structure(dash):
    errors = []
    ids = [p["id"] for p in dash["panels"]]
    if len(ids) != len(set(ids)):
        errors.append(f"panel ids are not unique: {ids}")
    names = [v["name"] for v in dash["templating"]["list"]]
    if "datasource" not in names:
        errors.append("no datasource variable: the dashboard cannot be imported "
                      "into a Grafana with another Prometheus uid")
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"panel {p['id']}: datasource is not ${{datasource}}")
        if not p.get("targets"):
            errors.append(f"panel {p['id']} '{p['title']}' has no query")
        refs = [t.get("refId") for t in p.get("targets", [])]
        if None in refs or len(refs) != len(set(refs)):
            errors.append(f"panel {p['id']}: refIds missing or repeated: {refs}")
    return errors


# The "Migrations" row queries each of these (docs/migration.md).
MIGRATION_METRICS = [
    "pitstop_controller_migrations_started_total",
    "pitstop_controller_migrations_committed_total",
    "pitstop_controller_migrations_aborted_total",
    "pitstop_controller_migration_phase_seconds_bucket",
    "pitstop_controller_migration_downtime_seconds_bucket",
    "pitstop_controller_policy_actions_total",
]


def row_queries(dash, title):
    """Queries of the panels under the row titled `title` (None: no row)."""
    out, inside, found = [], False, False
    for p in dash["panels"]:
        if p["type"] == "row":
            inside = p["title"] == title
            found = found or inside
            continue
        if inside:
            out += [t["expr"] for t in p.get("targets", [])]
    return out if found else None


def check_migrations_row(dash):
    exprs = row_queries(dash, "Migrations")
    if exprs is None:
        return ["no 'Migrations' row"]
    return [f"'Migrations' row: no panel queries {m}"
            for m in MIGRATION_METRICS
            if not any(re.search(rf"\b{m}\b", e) for e in exprs)]


def self_check():
    """The query check must fail on what the daemons do not export."""
    exported = {"pitstop_controller_migrations_committed_total": [{}],
                "pitstop_controller_migrations_aborted_total":
                    [{"reason": "operator"}]}
    bad = [
        "sum(increase(pitstop_controller_migrations_comitted_total[5m]))",
        "sum by (cause) (pitstop_controller_migrations_aborted_total)",
        'pitstop_controller_migrations_aborted_total{phase="x"}',
    ]
    errors = []
    for expr in bad:
        if not check_expr("self-check", expr, exported):
            errors.append(f"self-check: the query check accepts {expr}")
    good = "sum by (reason) (pitstop_controller_migrations_aborted_total)"
    errors += check_expr("self-check", good, exported)
    return errors


def main():
    src = os.environ["PITSTOP_SOURCE_DIR"]
    build = os.environ["PITSTOP_BINARY_DIR"]
    with open(os.path.join(src, "deploy/grafana/pitstop-dashboard.json")) as f:
        dash = json.load(f)
    errors = self_check()
    errors += check_structure(dash)
    errors += check_migrations_row(dash)

    tmp = tempfile.mkdtemp(prefix="pitstop-grafana-")
    procs = Processes(tmp)
    try:
        cport, cmetrics, ametrics = free_port(), free_port(), free_port()
        with open(os.path.join(tmp, "controller.yaml"), "w") as f:
            f.write('actions:\n  on_confirmed: "true"\n  on_resolved: "true"\n'
                    "  hooks_require_act: false\n")
        procs.start("controller", [
            os.path.join(build, "src/controller/pitstop-controller"),
            "--listen", f"127.0.0.1:{cport}", "--db", os.path.join(tmp, "c.db"),
            "--metrics-address", f"127.0.0.1:{cmetrics}",
            "--detection-cycle-ms", "100", "--config",
            os.path.join(tmp, "controller.yaml")])
        sock = os.path.join(tmp, "agent.sock")
        procs.start("agent", [
            os.path.join(build, "src/agent/pitstop-agent"), "--ingest-socket",
            sock, "--controller", f"127.0.0.1:{cport}", "--host", "gnode",
            "--metrics-address", f"127.0.0.1:{ametrics}"])
        wait_for("agent socket", lambda: os.path.exists(sock), 30, procs.logs)
        ranks = []
        for r in range(4):
            # The ranks' transport: the agent's ingest.shm_socket (default
            # next to ingest.socket).
            shm = os.path.join(tmp, "agent-shm.sock")
            env = dict(os.environ, PITSTOP_AGENT_SOCKET=shm, RANK=str(r),
                       PITSTOP_HOST="gnode", PITSTOP_JOB_ID="grafana-job",
                       NCCL_PROFILER_PLUGIN=os.path.join(
                           build, "plugin/libnccl-profiler-pitstop.so"))
            ranks.append(procs.start(f"rank{r}", [
                os.path.join(build, "tests/harness/pitstop_emulated_rank"),
                "--ops", "30", "--comm-hash", "0xabc", "--rank", str(r),
                "--nranks", "4", "--end", "crash" if r == 3 else "finalize",
                "--linger-ms", "1500"], env=env))
        for p in ranks:
            p.wait(timeout=60)

        def scrape():
            sc, ctext = http_get(f"http://127.0.0.1:{cmetrics}/metrics")
            sa, atext = http_get(f"http://127.0.0.1:{ametrics}/metrics")
            if sc != 200 or sa != 200:
                return None
            series = parse_metrics(ctext)
            series.update(parse_metrics(atext))
            # Wait for the crash fault, its hook and the agents' op series.
            want = ["pitstop_controller_faults_total",
                    "pitstop_controller_actions_total",
                    "pitstop_controller_open_fault_suspects",
                    "pitstop_agent_ops_total"] + MIGRATION_METRICS
            return series if all(w in series for w in want) else None

        exported = wait_for("metrics with a fault, an action and ops", scrape,
                            60, procs.logs)
        names = sorted(n for n in exported if n.startswith("pitstop_"))
        print(f"{len(names)} pitstop series names exported", flush=True)
        checked = 0
        for where, expr in queries(dash):
            errors += check_expr(where, expr, exported)
            checked += 1
        print(f"{checked} dashboard queries checked", flush=True)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    if errors:
        print("FAIL:\n  " + "\n  ".join(errors))
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
