#!/usr/bin/env bash
# Builds pitstop's Debian packages and the relocatable tarball of the
# in-process library and the NCCL tuner (docs/deploy.md):
#   build/packages/pitstop-agent_<v>_amd64.deb, pitstop-controller_...,
#   pitstopctl_..., libnccl-profiler-pitstop_..., python3-pitstop_... (when
#   python/pitstop exists; with the torch backend when libtorch-dev is
#   installed), and
#   build/packages/libnccl-profiler-pitstop-<v>-linux-<arch>.tar.gz
# Uses the default build (build/, the same as tools/test.sh), so it costs
# only the packaging on top of a build. Install on a node with
#   apt install ./build/packages/pitstop-agent_*.deb ./build/packages/libnccl-profiler-pitstop_*.deb
# Usage: tools/build-packages.sh [--no-build] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
if [[ ${1:-} == "--no-build" ]]; then build=0; shift; fi
out=${1:-$PWD/build/packages}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if ((build)); then
  tools/install-deps.sh
  cmake --preset default ${PITSTOP_CMAKE_ARGS:-}
  # pitstop_packages (cmake/packaging.cmake): the daemons, tools, the
  # library and tuner, the Python stubs and the torch backend extension.
  cmake --build --preset default -j "${PITSTOP_JOBS:-$(nproc)}" \
    --target pitstop_packages
fi

echo "build-packages: Debian packages -> $out"
(cd build && cpack -G DEB -B "$out/cpack" >"$out/cpack.log" 2>&1) || {
  tail -40 "$out/cpack.log"
  exit 1
}
mv "$out"/cpack/*.deb "$out"/
rm -rf "$out/cpack/_CPack_Packages"

# The relocatable tarball: the library plus every shared library it needs
# that is not part of glibc/libstdc++ (gRPC, Abseil, OpenSSL, ...), with
# RPATH $ORIGIN so that it loads from wherever it is unpacked (an init
# container copies it into the training container). Needs glibc >= 2.36 and
# GCC 12's libstdc++ in the training image (Debian 12, Ubuntu 23.04+).
version=$(sed -n 's/^project(pitstop VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
arch=$(uname -m)
name=libnccl-profiler-pitstop-$version-linux-$arch
stage=$out/$name
rm -rf "$stage"
mkdir -p "$stage/lib"
lib=build/plugin/libnccl-profiler-pitstop.so
cp "$lib" "$stage/lib/"
# The tuner (flow plan steering) links only libc and libstdc++: nothing to
# bundle for it.
cp build/tuner/libnccl-tuner-pitstop.so "$stage/lib/"
# Not bundled: the C library and the C++ runtime the process already has.
system='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so)'
ldd "$lib" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
  while read -r soname path; do
    if [[ ! $soname =~ $system ]]; then cp -L "$path" "$stage/lib/$soname"; fi
  done
for f in "$stage"/lib/*.so*; do
  strip --strip-unneeded "$f"
  # DT_RPATH (not RUNPATH): also used for the dependencies' dependencies.
  patchelf --force-rpath --set-rpath '$ORIGIN' "$f"
done
cat >"$stage/README" <<EOT
pitstop in-process library $version ($arch), relocatable.
Unpack anywhere (e.g. in an init container onto a shared volume) and set
  NCCL_PROFILER_PLUGIN=<dir>/lib/libnccl-profiler-pitstop.so
  PITSTOP_AGENT_SOCKET=/run/pitstop/agent.sock   (the agent's socket, mounted)
and, to let the node's flow plan steer NCCL (docs/planning.md),
  NCCL_TUNER_PLUGIN=<dir>/lib/libnccl-tuner-pitstop.so
  (with /run/pitstop/tuner-table of the host visible, or
  PITSTOP_TUNER_TABLE naming the agent's table)
Bundled: the library and the shared libraries it needs besides glibc and
libstdc++ (needs glibc >= 2.36, libstdc++ of GCC >= 12). See docs/deploy.md.
EOT
tar -C "$out" -czf "$out/$name.tar.gz" "$name"
rm -rf "$stage"
ls -l "$out"/*.deb "$out"/*.tar.gz
