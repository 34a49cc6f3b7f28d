#!/usr/bin/python3
"""The Debian packages and the relocatable library tarball, installed.

Builds them with `tools/build-packages.sh --no-build` from the default build
into a temporary directory, then:
  - checks every package's file list, conffiles and computed Depends;
  - unpacks the tarball and checks that the library's dependencies resolve
    inside it (ldd), i.e. it is relocatable;
  - as root: `dpkg -i` all packages into this machine (packages that were not
    installed before are purged again at the end), checks the installed
    files, the pitstop user and group, `systemd-analyze verify` on the
    installed units, starts the installed daemons with the installed default
    configuration (on loopback, temporary paths) and stops them with SIGTERM,
    and runs the installed Slurm TaskProlog, and (python3-pitstop with the
    torch backend) runs a 2-rank all-reduce on the installed
    pitstop.torch.nccl_backend outside the source tree.
Not root: the static checks run, then exit 77 (skipped) saying why.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_util import SKIP, Processes, free_port, wait_for  # noqa: E402

UNIT_DIR = "/lib/systemd/system"
EXPECTED = {
    "pitstop-agent": ["/usr/bin/pitstop-agent", f"{UNIT_DIR}/pitstop-agent.service",
                      "/etc/pitstop/agent.yaml", "/etc/default/pitstop-agent",
                      "/usr/lib/sysusers.d/pitstop-agent.conf"],
    "pitstop-controller": ["/usr/bin/pitstop-controller",
                           f"{UNIT_DIR}/pitstop-controller.service",
                           "/etc/pitstop/controller.yaml",
                           "/etc/default/pitstop-controller",
                           "/usr/share/pitstop/grafana/pitstop-dashboard.json",
                           "/usr/share/doc/pitstop-controller/examples/controller-slurm.yaml"],
    "pitstopctl": ["/usr/bin/pitstopctl", "/usr/bin/pitstop"],
    "libnccl-profiler-pitstop": [
        "/usr/lib/x86_64-linux-gnu/libnccl-profiler-pitstop.so",
        "/usr/lib/x86_64-linux-gnu/libnccl-tuner-pitstop.so",
        "/usr/share/pitstop/slurm/pitstop-task-prolog.sh"],
}
PY = "/usr/lib/python3/dist-packages/pitstop"
PYTHON_FILES = [f"{PY}/__init__.py", f"{PY}/client.py",
                f"{PY}/torch/__init__.py", f"{PY}/torch/nccl_backend.py"]
# Built when libtorch-dev & co. are installed (src/torch_backend).
TORCH_BACKEND_SO = "_nccl_backend.cpython-311-x86_64-linux-gnu.so"
CONFFILES = {
    "pitstop-agent": ["/etc/pitstop/agent.yaml", "/etc/default/pitstop-agent"],
    "pitstop-controller": ["/etc/pitstop/controller.yaml",
                           "/etc/default/pitstop-controller"],
}


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def deb_info(deb):
    name = run(["dpkg-deb", "-f", deb, "Package"]).stdout.strip()
    files = [l.split()[-1].lstrip(".") for l in
             run(["dpkg-deb", "-c", deb]).stdout.splitlines()
             if not l.startswith("d")]
    tmp = tempfile.mkdtemp()
    run(["dpkg-deb", "-e", deb, tmp])
    conff = []
    if os.path.exists(f"{tmp}/conffiles"):
        conff = open(f"{tmp}/conffiles").read().split()
    scripts = sorted(os.listdir(tmp))
    shutil.rmtree(tmp)
    depends = run(["dpkg-deb", "-f", deb, "Depends"]).stdout.strip()
    return name, files, conff, scripts, depends


def check_static(src, out):
    debs = sorted(f for f in os.listdir(out) if f.endswith(".deb"))
    names = {}
    for deb in debs:
        name, files, conff, scripts, depends = deb_info(os.path.join(out, deb))
        names[name] = os.path.join(out, deb)
        for f in EXPECTED.get(name, []):
            assert f in files, f"{deb}: {f} missing; has {files}"
        assert sorted(conff) == sorted(CONFFILES.get(name, [])), (deb, conff)
        if name in CONFFILES:
            assert {"postinst", "prerm", "postrm"} <= set(scripts), (deb, scripts)
        if name != "python3-pitstop":
            assert "libc6" in depends, f"{deb}: Depends not computed: {depends!r}"
        else:
            check_python_package(os.path.join(out, deb), files, depends)
            assert "prerm" in scripts, (deb, scripts)  # its byte code goes
        print(f"{deb}: {len(files)} files, Depends: {depends[:70]}...", flush=True)
    want = set(EXPECTED)
    if os.path.isdir(os.path.join(src, "python/pitstop")):
        want.add("python3-pitstop")
    assert want <= set(names), f"packages {sorted(names)}, expected {sorted(want)}"
    return names


def torch_backend_built():
    binary = os.environ["PITSTOP_BINARY_DIR"]
    return os.path.exists(os.path.join(binary, "python/pitstop/torch",
                                       TORCH_BACKEND_SO))


def check_python_package(deb, files, depends):
    """The trainer library, its stubs and (when built) the torch backend;
    the extension's Depends are listed by hand (no dpkg-shlibdeps: its
    libnccl.so.2 is in no package), so check them against readelf."""
    for f in PYTHON_FILES:
        assert f in files, f"{deb}: {f} missing; has {files}"
    if not torch_backend_built():
        return
    so = f"{PY}/torch/{TORCH_BACKEND_SO}"
    assert so in files, f"{deb}: {so} missing"
    assert f"{PY}/v1/trainer_pb2.py" in files, f"{deb}: no generated stubs"
    for want in ("python3-torch (>= 1.13)", "python3-torch (<< 1.14~)",
                 "libtorch1.13", "python3 (<< 3.12)"):
        assert want in depends, f"{deb}: Depends lacks {want}: {depends}"
    tmp = tempfile.mkdtemp()
    try:
        r = run(["dpkg-deb", "-x", deb, tmp])
        assert r.returncode == 0, r.stderr
        dyn = run(["readelf", "-d", tmp + so]).stdout
    finally:
        shutil.rmtree(tmp)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", dyn)
    assert "libnccl.so.2" in needed, needed
    assert "RPATH" not in dyn and "RUNPATH" not in dyn, dyn
    # Every other library it links is named in Depends by its package.
    owners = {"libtorch.so.1.13": "libtorch1.13",
              "libtorch_cpu.so.1.13": "libtorch1.13",
              "libc10.so.1.13": "libtorch1.13", "libc.so.6": "libc6",
              "libstdc++.so.6": "libstdc++6", "libgcc_s.so.1": "libgcc-s1"}
    for lib in needed:
        if lib == "libnccl.so.2":
            continue
        pkg = "libabsl20220623" if lib.startswith("libabsl_") else owners.get(lib)
        assert pkg and pkg in depends, f"{deb}: {lib} needs {pkg} in {depends}"


def check_installed_torch_backend(tmp):
    """The installed backend, as a user runs it: system Python, no source
    tree on the path, libnccl.so.2 = the CPU backend of this build."""
    script = os.path.join(tmp, "allreduce.py")
    with open(script, "w") as f:
        f.write(
            "import os, sys, torch, torch.distributed as dist\n"
            "import pitstop.torch.nccl_backend as nb\n"
            "assert nb.__file__.startswith('/usr/lib/python3/dist-packages'), nb.__file__\n"
            "rank = int(sys.argv[1])\n"
            "dist.init_process_group('pitstop_nccl', init_method='file://' + sys.argv[2],\n"
            "                        rank=rank, world_size=2)\n"
            "t = torch.full((4,), float(rank + 1))\n"
            "dist.all_reduce(t)\n"
            "assert t.tolist() == [3.0] * 4, t\n"
            "print('ok', nb.nccl_library())\n")
    lib = os.path.join(os.environ["PITSTOP_BINARY_DIR"], "src/nccl/cpu/lib")
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": lib,
           "PITSTOP_CPU_NCCL_STORE_DIR": tmp, "OMP_NUM_THREADS": "1"}
    store = os.path.join(tmp, "store")
    procs = [subprocess.Popen(["/usr/bin/python3", script, str(r), store],
                              cwd=tmp, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and "ok " + lib in out, out
    print("installed pitstop.torch.nccl_backend: 2-rank all-reduce ok",
          flush=True)


def check_tarball(out):
    tars = [f for f in os.listdir(out) if f.endswith(".tar.gz")]
    assert len(tars) == 1, tars
    tmp = tempfile.mkdtemp(prefix="pitstop-tarball-")
    try:
        with tarfile.open(os.path.join(out, tars[0])) as t:
            t.extractall(tmp)
        (top,) = os.listdir(tmp)
        lib = os.path.join(tmp, top, "lib", "libnccl-profiler-pitstop.so")
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        ldd = run(["ldd", lib], env=env).stdout
        bundled = set(os.listdir(os.path.join(tmp, top, "lib")))
        for line in ldd.splitlines():
            m = re.match(r"\s*(\S+) => (\S+)", line)
            if not m:
                continue
            soname, path = m.groups()
            assert path != "not", f"tarball: {soname} not found\n{ldd}"
            if soname in bundled:
                assert path.startswith(tmp), \
                    f"tarball: {soname} resolves to {path}, not the bundled copy\n{ldd}"
        # The symbols NCCL looks up are exported.
        syms = run(["nm", "-D", "--defined-only", lib]).stdout
        assert "ncclProfiler_v5" in syms, syms[:400]
        # The tuner beside it (flow plan steering), loadable as unpacked.
        tuner = os.path.join(tmp, top, "lib", "libnccl-tuner-pitstop.so")
        assert os.path.exists(tuner), f"tarball: no tuner in {sorted(bundled)}"
        ldd = run(["ldd", tuner], env=env).stdout
        assert " not found" not in ldd, f"tarball: tuner\n{ldd}"
        syms = run(["nm", "-D", "--defined-only", tuner]).stdout
        assert "ncclTunerPlugin_v6" in syms, syms[:400]
        print(f"{tars[0]}: {len(bundled)} libraries, all dependencies resolve "
              f"inside it", flush=True)
    finally:
        shutil.rmtree(tmp)


def installed(pkg):
    r = run(["dpkg-query", "-W", "-f=${Status}", pkg])
    return "install ok installed" in r.stdout


def check_installed(src, names, tmp):
    for pkg, files in EXPECTED.items():
        for f in files:
            assert os.path.exists(f), f"{pkg}: {f} not installed"
    assert run(["getent", "group", "pitstop"]).returncode == 0, "no pitstop group"
    assert run(["getent", "passwd", "pitstop"]).returncode == 0, "no pitstop user"
    for unit in ["pitstop-agent.service", "pitstop-controller.service"]:
        text = open(f"{UNIT_DIR}/{unit}").read()
        assert "ExecStart=/usr/bin/" in text, f"{unit}: ExecStart not /usr/bin"
        r = run(["systemd-analyze", "verify", f"{UNIT_DIR}/{unit}"])
        bad = [l for l in (r.stdout + r.stderr).splitlines() if "pitstop" in l]
        assert not bad, f"systemd-analyze verify {unit}:\n" + "\n".join(bad)
    print("installed: files, pitstop user/group, units verified", flush=True)

    # The installed daemons start with the installed default configs.
    procs = Processes(tmp)
    try:
        port_file = os.path.join(tmp, "port")
        c = procs.start("controller", [
            "/usr/bin/pitstop-controller", "--config", "/etc/pitstop/controller.yaml",
            "--listen", "127.0.0.1:0", "--port-file", port_file,
            "--db", os.path.join(tmp, "c.db"), "--metrics-address", ""])
        port = wait_for("installed controller", lambda: os.path.exists(port_file)
                        and open(port_file).read().strip(), 30, procs.logs)
        sock = os.path.join(tmp, "agent.sock")
        a = procs.start("agent", [
            "/usr/bin/pitstop-agent", "--config", "/etc/pitstop/agent.yaml",
            "--ingest-socket", sock, "--controller", f"127.0.0.1:{port}",
            "--metrics-address", f"127.0.0.1:{free_port()}"])
        wait_for("installed agent socket", lambda: os.path.exists(sock), 30,
                 procs.logs)
        st = os.stat(sock)
        import grp
        assert grp.getgrgid(st.st_gid).gr_name == "pitstop", \
            "agent.yaml's socket_group: pitstop not applied"
        r = run(["/usr/bin/pitstopctl", "--controller", f"127.0.0.1:{port}",
                 "-o", "json", "status"])
        assert r.returncode == 0 and '"nodes_total"' in r.stdout, r.stdout + r.stderr
        for p in (a, c):
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=30) == 0, procs.logs()
    finally:
        procs.stop_all()
    r = run(["/usr/share/pitstop/slurm/pitstop-task-prolog.sh"],
            env={"SLURM_JOB_ID": "4711", "PATH": "/usr/bin:/bin"})
    assert "export PITSTOP_JOB_ID=4711" in r.stdout, r.stdout
    assert ("export NCCL_PROFILER_PLUGIN=/usr/lib/x86_64-linux-gnu/"
            "libnccl-profiler-pitstop.so") in r.stdout, r.stdout
    print("installed daemons ran with the default configs; TaskProlog ok",
          flush=True)
    if "python3-pitstop" in names:
        for f in PYTHON_FILES:
            assert os.path.exists(f), f"python3-pitstop: {f} not installed"
        if torch_backend_built():
            check_installed_torch_backend(tmp)


def main():
    src = os.environ["PITSTOP_SOURCE_DIR"]
    tmp = tempfile.mkdtemp(prefix="pitstop-pkg-")
    out = os.path.join(tmp, "packages")
    try:
        r = subprocess.run([os.path.join(src, "tools/build-packages.sh"),
                            "--no-build", out], cwd=src, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        names = check_static(src, out)
        check_tarball(out)
        if os.geteuid() != 0:
            print("SKIPPED: installing with dpkg -i needs root (the package "
                  "contents were checked)")
            sys.exit(SKIP)
        before = {n for n in names if installed(n)}
        try:
            r = run(["dpkg", "-i", *names.values()])
            assert r.returncode == 0, r.stdout + r.stderr
            check_installed(src, names, tmp)
        finally:
            added = [n for n in names if n not in before]
            if added:
                r = run(["dpkg", "--purge", *added])
                assert r.returncode == 0, r.stdout + r.stderr
                # Nothing left behind, byte code included (prerm).
                if "python3-pitstop" in added:
                    assert not os.path.exists(PY), sorted(
                        os.path.join(d, f) for d, _, fs in os.walk(PY)
                        for f in fs)
        print("PASS")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
