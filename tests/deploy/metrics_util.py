"""Helpers for the deployment tests: processes, ports, Prometheus text."""
import os
import re
import socket
import subprocess
import time
import urllib.request

SKIP = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout_s, log=None):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.25)
    msg = f"timed out after {timeout_s} s waiting for {what}"
    if log:
        msg += "\n" + log()
    raise AssertionError(msg)


def http_get(url, timeout=5):
    """(status, body) or (None, error text)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except Exception as e:  # noqa: BLE001 - any failure is "does not answer"
        return None, str(e)


def parse_metrics(text):
    """{series name: [label dicts]} from Prometheus text format."""
    series = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+", line)
        if not m:
            continue
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                 m.group(3) or ""))
        series.setdefault(m.group(1), []).append(labels)
    return series


class Processes:
    """Starts processes in their own sessions; stops them all on close."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.procs = []

    def start(self, name, argv, env=None):
        out = open(os.path.join(self.log_dir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True)
        self.procs.append((name, p))
        return p

    def logs(self, tail=3000):
        text = ""
        for name, _ in self.procs:
            path = os.path.join(self.log_dir, name + ".log")
            with open(path, errors="replace") as f:
                text += f"--- {name}\n" + f.read()[-tail:]
        return text

    def stop_all(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
