"""Starting a workload of rendered manifests the way a kubelet would, on
one emulated node: volumes bind-mounted in a private mount namespace, init
containers, env with fieldRefs and $(VAR) expansion, the manifests'
identities (setpriv), probes. Used by k8s_test.py (runs as root inside a
private network namespace)."""
import os
import re
import shlex
import socket
import subprocess

from metrics_util import http_get

NODE = "node-a"
# What the image holds (deploy/container/Dockerfile) -> the build's files.
IMAGE_FILES = {
    "/usr/bin/pitstop-agent": "src/agent/pitstop-agent",
    "/usr/bin/pitstop-controller": "src/controller/pitstop-controller",
    "/usr/bin/pitstopctl": "tools/pitstopctl/pitstopctl",
}
WORKLOADS = ("DaemonSet", "StatefulSet", "Deployment", "Job")
BUILD = os.environ.get("PITSTOP_BINARY_DIR", "")


def pod_spec(d):
    return d["spec"]["template"]["spec"] if d["kind"] in WORKLOADS else None


def containers(d, init=False):
    spec = pod_spec(d)
    if not spec:
        return []
    return (spec.get("initContainers", []) if init else []) + spec["containers"]


def find(docs, kind, name):
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"{kind} {name} not found")


def port_number(container, port):
    """A probe or target port (name or number) -> number, or None."""
    for p in container.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def expand(s, env):
    """Kubernetes $(VAR) expansion; $$(VAR) escapes."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(
                      m.group(1), m.group(0)), s)


def container_env(c, pod):
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
            continue
        ref = e["valueFrom"]["fieldRef"]["fieldPath"]
        if ref == "spec.nodeName":
            env[e["name"]] = NODE
        elif ref == "metadata.name":
            env[e["name"]] = pod["name"]
        elif ref == "metadata.namespace":
            env[e["name"]] = pod["namespace"]
        else:
            m = re.fullmatch(r"metadata\.labels\['([^']+)'\]", ref)
            assert m and m.group(1) in pod["labels"], f"fieldRef {ref}"
            env[e["name"]] = pod["labels"][m.group(1)]
    return env


class Pod:
    """One pod of a workload: volumes prepared, containers started."""

    def __init__(self, docs, w, root, hostpaths):
        self.w, self.spec = w, pod_spec(w)
        self.name = w["metadata"]["name"] + "-0"
        labels = dict(w["spec"]["template"]["metadata"].get("labels", {}))
        if w["kind"] == "Job":  # what the Job controller adds
            labels["job-name"] = w["metadata"]["name"]
        self.meta = {"name": self.name, "labels": labels,
                     "namespace": w["metadata"].get("namespace", "default")}
        self.root = os.path.join(root, self.name)
        os.makedirs(self.root)
        sc = self.spec.get("securityContext", {})
        self.fs_group = sc.get("fsGroup")
        self.volumes = {}
        for v in self.spec.get("volumes", []):
            path = os.path.join(self.root, "vol-" + v["name"])
            if "hostPath" in v:
                # One node: every pod sees the same host directory.
                path = hostpaths.setdefault(v["hostPath"]["path"], os.path.join(
                    root, "host" + v["hostPath"]["path"].replace("/", "_")))
                if not os.path.isdir(path):
                    assert v["hostPath"].get("type") == "DirectoryOrCreate", \
                        f"{self.name}: hostPath {v['hostPath']['path']} must " \
                        f"exist first (type {v['hostPath'].get('type')})"
                    os.makedirs(path)
            else:
                os.makedirs(path)
            if "configMap" in v:
                cm = find(docs, "ConfigMap", v["configMap"]["name"])
                for key, text in cm["data"].items():
                    with open(os.path.join(path, key), "w") as f:
                        f.write(text)
                os.chmod(path, 0o755)
            elif "emptyDir" in v and self.fs_group is not None:
                os.chown(path, 0, self.fs_group)
                os.chmod(path, 0o2775)
            elif "emptyDir" in v:
                os.chmod(path, 0o777)
            self.volumes[v["name"]] = path
        for t in w["spec"].get("volumeClaimTemplates", []):
            path = os.path.join(self.root, "pvc-" + t["metadata"]["name"])
            os.makedirs(path)
            if self.fs_group is not None:  # what fsGroup does to the volume
                os.chown(path, 0, self.fs_group)
                os.chmod(path, 0o2775)
            self.volumes[t["metadata"]["name"]] = path
        self.procs = {}

    def mounts(self, c, extra=()):
        cmds = []
        for m in list(c.get("volumeMounts", [])) + list(extra):
            src = m["src"] if "src" in m else self.volumes[m["name"]]
            cmds.append(f"mkdir -p {shlex.quote(m['mountPath'])} 2>/dev/null || "
                        f"test -d {shlex.quote(m['mountPath'])}")
            cmds.append(f"mount --bind {shlex.quote(src)} "
                        f"{shlex.quote(m['mountPath'])}")
            if m.get("readOnly"):
                cmds.append(f"mount -o remount,bind,ro {shlex.quote(m['mountPath'])}")
        return cmds

    def identity(self, c):
        sc = dict(self.spec.get("securityContext", {}))
        sc.update(c.get("securityContext", {}))
        uid = sc.get("runAsUser")
        if uid is None or uid == 0:
            return []
        groups = [g for g in [self.spec["securityContext"].get("fsGroup")] +
                  self.spec["securityContext"].get("supplementalGroups", [])
                  if g is not None]
        grp = (f"--groups={','.join(map(str, groups))}" if groups
               else "--clear-groups")
        return ["setpriv", f"--reuid={uid}", f"--regid={sc.get('runAsGroup', uid)}",
                grp, "--"]

    def argv(self, c, command=None, env=None):
        env = env if env is not None else container_env(c, self.meta)
        cmd = [expand(a, env) for a in (command or c["command"]) + c.get("args", [])]
        if cmd[0] in IMAGE_FILES:
            cmd[0] = os.path.join(BUILD, IMAGE_FILES[cmd[0]])
        return cmd, env

    def run(self, c, log, wait, command=None, env=None, extra_mounts=()):
        cmd, env = self.argv(c, command, env)
        script = "set -e\n" + "\n".join(self.mounts(c, extra_mounts)) + \
            "\nexec " + " ".join(map(shlex.quote, self.identity(c) + cmd))
        full_env = dict(os.environ)
        full_env.update(env)
        out = open(os.path.join(self.root, log), "w")
        p = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                              "/bin/sh", "-c", script], stdout=out,
                             stderr=subprocess.STDOUT, env=full_env)
        if wait:
            assert p.wait(timeout=60) == 0, f"{self.name}/{c['name']} failed:\n" \
                + open(os.path.join(self.root, log)).read()
        self.procs[c["name"]] = p
        return p

    def log(self, name):
        path = os.path.join(self.root, name + ".log")
        return open(path, errors="replace").read()[-3000:] if os.path.exists(path) else ""

    def start(self):
        for c in self.spec.get("initContainers", []):
            self.run(c, c["name"] + ".log", wait=True)
        for c in self.spec["containers"]:
            self.run(c, c["name"] + ".log", wait=False)

    def probe(self, c, kind):
        p = c.get(kind)
        if not p:
            return True
        if "httpGet" in p:
            port = port_number(c, p["httpGet"]["port"])
            status, _ = http_get(f"http://127.0.0.1:{port}{p['httpGet']['path']}")
            return status is not None and 200 <= status < 400
        if "tcpSocket" in p:
            with socket.socket() as s:
                s.settimeout(2)
                return s.connect_ex(("127.0.0.1",
                                     port_number(c, p["tcpSocket"]["port"]))) == 0
        if "exec" in p:
            pid = self.procs[c["name"]].pid
            r = subprocess.run(["nsenter", "--mount", f"--target={pid}", "--",
                                *self.identity(c), *p["exec"]["command"]],
                               capture_output=True, timeout=10)
            return r.returncode == 0
        raise AssertionError(f"{c['name']}: {kind} kind not handled: {p}")

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for name, p in self.procs.items():
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                rc = "killed after 30 s"
            if rc != 0 and name != "trainer":
                raise AssertionError(f"{self.name}/{name}: exit {rc} on SIGTERM\n"
                                     + self.log(name))
