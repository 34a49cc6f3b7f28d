#!/usr/bin/env bash
# Installs every build and test dependency of pitstop from Debian 12 packages.
# Idempotent: packages already present are skipped by apt; safe to run again.
# Usage: tools/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev
  prometheus-cpp-dev libcivetweb-dev libsqlite3-dev sqlite3 zlib1g-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev libsystemd-dev
  clang clang-format clang-tidy libclang-rt-14-dev binutils procps python3
  # lld: links ~6x faster than ld.bfd (CMake uses it when installed)
  lld
  # Deployment tests (tests/deploy): a real Slurm, package building, YAML.
  slurmctld slurmd slurm-client munge dpkg-dev fakeroot patchelf python3-yaml
  # python/pitstop (trainer library) and its tests: Debian's Python, not PyPI
  python3-torch python3-grpcio python3-protobuf python3-pytest
  # OpenBLAS: Debian's torch calls the system BLAS; the reference one is ~50x slower
  libopenblas0-pthread
  # Several controllers on etcd (tools/ha-demo.sh, ha tests).
  etcd-server etcd-client
  # Mutual TLS (issue #15): tools/gen-dev-certs.sh and the auth tests
  openssl
  # CPU NCCL backend (src/nccl/cpu, issue #13): gloo's TCP pairs and stores
  libgloo-dev
  # Certificates checked before a SIGHUP reload (src/common/tls_reloader.cc)
  libssl-dev
  # The torch backend over the NCCL C API (src/torch_backend, issue #28): a c10d
  # extension built against Debian's libtorch (same version as python3-torch),
  # its pybind11 bindings and the Python headers
  libtorch-dev pybind11-dev python3-dev
  # The torch job's corpus (tools/torch-job, docs/pytorch.md): 2.6 MB of
  # fortune cookies, plain text under /usr/share/games/fortunes
  fortunes
  # systemd-analyze: the unit file tests (agent, controller) verify and rate
  # deploy/*.service; .ci/run does not accept them skipped
  systemd
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
