#!/usr/bin/python3
"""The Kubernetes manifests (deploy/k8s) checked against the real binaries.

No cluster here, so the test does what a cluster would do with them:
  1. renders deploy/k8s with `kubectl kustomize` when kubectl is installed,
     else reads the files its kustomization.yaml lists (namespace and images
     applied), and checks references: Service selectors and target ports,
     probe ports, volumes, ConfigMaps, ServiceAccounts, the StatefulSet's
     Service, the ServiceMonitor and NetworkPolicies;
  2. in a private network namespace (loopback only, the manifests' own
     ports) with the Services' DNS names mapped to 127.0.0.1, starts each
     workload like the kubelet: its volumes (ConfigMap files, hostPath,
     PVC, emptyDir) bind-mounted at the manifests' mount paths in a private
     mount namespace, init containers first, the env (fieldRefs, $(VAR)
     expansion), command and args exactly as written (the image's
     /usr/bin/pitstop-* mapped to the built binaries), as the manifests'
     runAsUser/runAsGroup/fsGroup/supplementalGroups;
  3. checks every readiness/liveness probe (exec, httpGet, tcpSocket) and
     port answers, that the agent registered with the controller through
     the Service name, and runs the example training job's env and volumes
     with two emulated ranks through the real library: the controller sees
     job llm-pretrain on the node.
Needs root (namespaces, mounts); otherwise only step 1 runs and it exits 77.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_util import SKIP, wait_for  # noqa: E402
from k8s_kubelet import (IMAGE_FILES, NODE, WORKLOADS, Pod,  # noqa: E402
                         container_env, containers, find, pod_spec,
                         port_number)

SRC = os.environ.get("PITSTOP_SOURCE_DIR", "")
BUILD = os.environ.get("PITSTOP_BINARY_DIR", "")
IMAGE_PROFILER_DIR = "/opt/pitstop-profiler/lib"


# --- 1. render and static checks ---------------------------------------------
def render(path):
    # PITSTOP_K8S_RENDER=python forces the test's own renderer.
    if shutil.which("kubectl") and os.environ.get("PITSTOP_K8S_RENDER") != "python":
        r = subprocess.run(["kubectl", "kustomize", path], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"kubectl kustomize {path}:\n{r.stderr}"
        print(f"rendered {path} with kubectl kustomize", flush=True)
        return [d for d in yaml.safe_load_all(r.stdout) if d]
    print(f"rendered {path} from the files its kustomization.yaml lists "
          f"(no kubectl)", flush=True)
    return render_by_hand(path)


def render_by_hand(path, namespace=None, images=None):
    with open(os.path.join(path, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    namespace = namespace or k.get("namespace")
    images = dict(images or {})
    for img in k.get("images", []):
        images.setdefault(img["name"], f"{img.get('newName', img['name'])}:"
                                       f"{img.get('newTag', 'latest')}")
    docs = []
    for res in k["resources"]:
        p = os.path.join(path, res)
        if os.path.isdir(p):
            docs += render_by_hand(p, namespace, images)
            continue
        with open(p) as f:
            for d in yaml.safe_load_all(f):
                if not d:
                    continue
                if d["kind"] not in ("Namespace", "ClusterRole",
                                     "ClusterRoleBinding"):
                    d["metadata"]["namespace"] = namespace
                for c in containers(d, init=True):
                    c["image"] = images.get(c["image"], c["image"])
                docs.append(d)
    return docs


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def static_checks(docs):
    errors = []
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    workloads = [d for d in docs if d["kind"] in WORKLOADS]
    for d in docs:
        for key in ("apiVersion", "kind", "metadata"):
            if key not in d:
                errors.append(f"{d.get('kind')}: no {key}")
    for w in workloads:
        spec, wname = pod_spec(w), w["metadata"]["name"]
        labels = w["spec"]["template"]["metadata"]["labels"]
        if "selector" in w["spec"] and not matches(
                w["spec"]["selector"]["matchLabels"], labels):
            errors.append(f"{wname}: selector does not match its pod labels")
        sa = spec.get("serviceAccountName")
        if sa and ("ServiceAccount", sa) not in names:
            errors.append(f"{wname}: ServiceAccount {sa} missing")
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        for t in w["spec"].get("volumeClaimTemplates", []):
            vols[t["metadata"]["name"]] = {"pvc": True}
        for v in vols.values():
            cm = v.get("configMap", {}).get("name")
            if cm and ("ConfigMap", cm) not in names:
                errors.append(f"{wname}: ConfigMap {cm} missing")
        for c in containers(w, init=True):
            if not c["image"].startswith("ghcr.io/pitstop/pitstop:"):
                errors.append(f"{wname}/{c['name']}: image {c['image']} not set "
                              f"by kustomize")
            csc = c.get("securityContext", {})
            if csc.get("allowPrivilegeEscalation") is not False or \
                    "ALL" not in csc.get("capabilities", {}).get("drop", []):
                errors.append(f"{wname}/{c['name']}: allowPrivilegeEscalation "
                              f"not false or capabilities not dropped")
            for m in c.get("volumeMounts", []):
                if m["name"] not in vols:
                    errors.append(f"{wname}/{c['name']}: volume {m['name']} "
                                  f"not defined")
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                p = c.get(probe, {})
                for how in ("httpGet", "tcpSocket"):
                    if how in p and port_number(c, p[how]["port"]) is None:
                        errors.append(f"{wname}/{c['name']}: {probe} port "
                                      f"{p[how]['port']} is no container port")
            if c["command"][0].startswith("/usr/bin/pitstop") and \
                    c["command"][0] not in IMAGE_FILES:
                errors.append(f"{wname}: {c['command'][0]} is not a binary "
                              f"the packages install")
        if w["kind"] == "StatefulSet":
            svc = find(docs, "Service", w["spec"]["serviceName"])
            if svc["spec"].get("clusterIP") != "None":
                errors.append(f"{wname}: serviceName {svc['metadata']['name']} "
                              f"is not headless")
    for s in (d for d in docs if d["kind"] == "Service"):
        sel = s["spec"]["selector"]
        targets = [w for w in workloads
                   if matches(sel, w["spec"]["template"]["metadata"]["labels"])]
        if not targets:
            errors.append(f"Service {s['metadata']['name']} selects no pods")
        for p in s["spec"]["ports"]:
            if not any(port_number(c, p["targetPort"]) for w in targets
                       for c in containers(w)):
                errors.append(f"Service {s['metadata']['name']} port "
                              f"{p['name']}: targetPort {p['targetPort']} is "
                              f"no container port")
    for sm in (d for d in docs if d["kind"] == "ServiceMonitor"):
        svcs = [s for s in docs if s["kind"] == "Service" and matches(
            sm["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
        if len(svcs) < 2:
            errors.append(f"ServiceMonitor selects {len(svcs)} Services")
        for e in sm["spec"]["endpoints"]:
            for s in svcs:
                if e["port"] not in [p["name"] for p in s["spec"]["ports"]]:
                    errors.append(f"ServiceMonitor port {e['port']} not in "
                                  f"Service {s['metadata']['name']}")
    for np in (d for d in docs if d["kind"] == "NetworkPolicy"):
        sel = np["spec"]["podSelector"]["matchLabels"]
        targets = [w for w in workloads
                   if matches(sel, w["spec"]["template"]["metadata"]["labels"])]
        if not targets:
            errors.append(f"NetworkPolicy {np['metadata']['name']} selects no pods")
        for rule in np["spec"].get("ingress", []):
            for p in rule.get("ports", []):
                if not any(port_number(c, p["port"]) for w in targets
                           for c in containers(w)):
                    errors.append(f"NetworkPolicy {np['metadata']['name']}: "
                                  f"port {p['port']} is no container port")
    return errors


def services_hosts(docs):
    lines = []
    for s in (d for d in docs if d["kind"] == "Service"):
        n, ns = s["metadata"]["name"], s["metadata"]["namespace"]
        lines.append(f"127.0.0.1 {n}.{ns}.svc.cluster.local {n}.{ns}.svc {n}.{ns}")
    return "\n".join(lines) + "\n127.0.0.1 localhost\n"


def inner(docs_file):
    with open(docs_file) as f:
        docs = json.load(f)
    job = yaml.safe_load(open(os.path.join(SRC, "deploy/k8s/examples/training-job.yaml")))
    job["metadata"]["namespace"] = "training"
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    root = tempfile.mkdtemp(prefix="pitstop-k8s-")
    hosts = os.path.join(root, "hosts")
    with open(hosts, "w") as f:
        f.write(services_hosts(docs))
    subprocess.run(["mount", "--bind", hosts, "/etc/hosts"], check=True)
    os.chmod(root, 0o755)
    hostpaths = {}
    pods = []
    try:
        ctl_w = find(docs, "StatefulSet", "pitstop-controller")
        agent_w = find(docs, "DaemonSet", "pitstop-agent")
        for w in (ctl_w, agent_w):
            pod = Pod(docs, w, root, hostpaths)
            pods.append(pod)
            pod.start()
            for c in pod.spec["containers"]:
                for kind in ("readinessProbe", "livenessProbe"):
                    wait_for(f"{pod.name}/{c['name']} {kind}",
                             lambda: pod.probe(c, kind) or (
                                 pod.procs[c["name"]].poll() is None or
                                 (_ for _ in ()).throw(AssertionError(
                                     f"{c['name']} exited:\n" + pod.log(c["name"])))),
                             60, lambda: pod.log(c["name"]))
                    print(f"{pod.name}/{c['name']}: {kind} answers", flush=True)
        # The agent found the controller by the Service name: pitstopctl
        # asks through the same name and port.
        svc = find(docs, "Service", "pitstop-controller")
        grpc_port = [p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc"][0]
        target = f"pitstop-controller.pitstop.svc.cluster.local:{grpc_port}"
        ctl = os.path.join(BUILD, IMAGE_FILES["/usr/bin/pitstopctl"])

        def ctl_json(*args):
            r = subprocess.run([ctl, "--controller", target, "-o", "json", *args],
                               capture_output=True, text=True, timeout=30)
            return json.loads(r.stdout) if r.returncode == 0 else None

        def agent_connected():
            nodes = ctl_json("nodes") or {}
            return any(n["host"] == NODE and n["agent_connected"]
                       for n in nodes.get("nodes", []))
        wait_for(f"agent {NODE} connected via {target}", agent_connected, 60,
                 lambda: pods[1].log("agent") + pods[0].log("controller"))
        print(f"agent registered as {NODE} with the controller at {target}",
              flush=True)

        # The example training job: its init container copies the library
        # from the image; two emulated ranks stand in for torchrun.
        image_lib = os.path.join(root, "image-profiler-lib")
        os.makedirs(image_lib)
        shutil.copy(os.path.join(BUILD, "plugin/libnccl-profiler-pitstop.so"),
                    image_lib)
        jpod = Pod(docs + [job], job, root, hostpaths)
        pods.append(jpod)
        init = jpod.spec["initContainers"][0]
        jpod.run(init, "init.log", wait=True,
                 extra_mounts=[{"src": image_lib, "mountPath": IMAGE_PROFILER_DIR,
                                "readOnly": True}])
        trainer = jpod.spec["containers"][0]
        env = container_env(trainer, jpod.meta)
        ranks = []
        for r in range(2):
            renv = dict(env, RANK=str(r))
            ranks.append(jpod.run(trainer, f"rank{r}.log", wait=False, env=renv, command=[
                os.path.join(BUILD, "tests/harness/pitstop_emulated_rank"),
                "--ops", "20", "--comm-hash", "0x5eed", "--rank", str(r),
                "--nranks", "2", "--end", "finalize", "--linger-ms", "500"]))
        for p in ranks:
            assert p.wait(timeout=120) == 0, jpod.log("rank0") + jpod.log("rank1")

        def job_seen():
            jobs = ctl_json("jobs") or {}
            return [j for j in jobs.get("jobs", []) if j["job_id"] == "llm-pretrain"
                    and NODE in j.get("hosts", [])]
        seen = wait_for("job llm-pretrain at the controller", job_seen, 60,
                        lambda: jpod.log("rank0") + pods[1].log("agent"))
        print(f"training job seen by the controller: {seen[0]}", flush=True)
        for pod in reversed(pods[:2]):
            pod.stop()
        print("PASS", flush=True)
    finally:
        for pod in pods:
            for p in pod.procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
        shutil.rmtree(root, ignore_errors=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--inner":
        inner(sys.argv[2])
        return
    docs = render(os.path.join(SRC, "deploy/k8s"))
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    print(f"{len(docs)} objects: {', '.join(kinds)}", flush=True)
    job = yaml.safe_load(open(os.path.join(SRC, "deploy/k8s/examples/training-job.yaml")))
    errors = static_checks(docs)
    # The job and the agent agree on the socket's host directory and path.
    agent = find(docs, "DaemonSet", "pitstop-agent")
    agent_cfg = yaml.safe_load(find(docs, "ConfigMap", "pitstop-agent-config")
                               ["data"]["agent.yaml"])
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]
           ["containers"][0]["env"]}
    # Ranks stream to the shared-memory transport's socket (ingest.shm_socket;
    # when unset, ingest.socket with ".sock" -> "-shm.sock").
    shm = agent_cfg["ingest"].get("shm_socket") or \
        agent_cfg["ingest"]["socket"].replace(".sock", "-shm.sock")
    if env["PITSTOP_AGENT_SOCKET"] != shm:
        errors.append("training job PITSTOP_AGENT_SOCKET differs from the "
                      "agent's ingest.shm_socket")
    hp = lambda spec: {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    if hp(pod_spec(agent)) != hp(job["spec"]["template"]["spec"]):
        errors.append("training job and agent mount different host paths")
    if errors:
        print("FAIL:\n  " + "\n  ".join(errors))
        sys.exit(1)
    print("static checks passed", flush=True)
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("SKIPPED: running the manifests' containers needs root (network "
              "and mount namespaces); the static checks passed")
        sys.exit(SKIP)
    # Mount points are created on this machine's file system (mount
    # namespaces share it); remove the ones that did not exist before.
    paths = {IMAGE_PROFILER_DIR}
    for w in [d for d in docs if d["kind"] in WORKLOADS] + [job]:
        for c in containers(w, init=True):
            paths |= {m["mountPath"] for m in c.get("volumeMounts", [])}
    created = set()
    for p in paths:
        while not os.path.exists(p):
            created.add(p)
            p = os.path.dirname(p)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(docs, f)
    try:
        r = subprocess.run(["unshare", "--net", "--mount", "--propagation",
                            "private", sys.executable, os.path.abspath(__file__),
                            "--inner", f.name], timeout=600)
    finally:
        os.unlink(f.name)
        for p in sorted(created, key=len, reverse=True):
            try:
                os.rmdir(p)
            except OSError as e:
                print(f"warning: cannot remove mount point {p}: {e}")
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
