// pitstop-cpu-nccl-bench: small-message collective latency of the CPU NCCL
// backend (src/nccl/cpu) across real processes over loopback TCP, one build
// of libnccl.so.2 beside another (docs/benchmarks.md, "CPU NCCL all-reduce
// latency").
//
//   pitstop-cpu-nccl-bench --lib build/src/nccl/cpu/lib/libnccl.so.2
//       [--baseline /tmp/base/libnccl.so.2] [--ranks 2] [--bytes 4,1024]
//       [--iters 300] [--rounds 3] [--op allreduce|broadcast|allgather]
//
// Each (round, library, size) runs in fresh processes: a runner process
// dlopens the library, takes a unique id, forks the other ranks (before any
// thread exists) and is rank 0 itself. Every rank runs a few warm-up calls,
// then `iters` timed calls of the collective; rank 0 times each call and
// sends the sorted latencies to this process through a pipe. Rounds
// interleave the libraries so a change in the machine's load hits both.
// Each result is checked (a sum of known values), so a broken build cannot
// look fast.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "src/nccl/cpu/nccl_api.h"

namespace {

// The few entry points the benchmark calls, resolved from one library.
struct Nccl {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t,
                             ncclRedOp_t, ncclComm_t, void*);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int,
                            ncclComm_t, void*);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t,
                             ncclComm_t, void*);
};

template <typename F>
bool Resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) std::fprintf(stderr, "%s: not exported\n", name);
  return *out != nullptr;
}

bool Load(const std::string& path, Nccl* n) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", path.c_str(), dlerror());
    return false;
  }
  return Resolve(lib, "ncclGetUniqueId", &n->get_unique_id) &&
         Resolve(lib, "ncclCommInitRank", &n->init_rank) &&
         Resolve(lib, "ncclCommDestroy", &n->destroy) &&
         Resolve(lib, "ncclAllReduce", &n->all_reduce) &&
         Resolve(lib, "ncclBroadcast", &n->broadcast) &&
         Resolve(lib, "ncclAllGather", &n->all_gather);
}

struct Config {
  int ranks = 2;
  int iters = 300;
  int warmup = 20;
  size_t bytes = 4;
  std::string op = "allreduce";
};

// One call of the collective on int32 values; rank r contributes r + 1
// everywhere. Returns false on an error or a wrong result.
bool RunOnce(const Nccl& n, ncclComm_t comm, const Config& c, int rank,
             std::vector<int32_t>& in, std::vector<int32_t>& out) {
  const size_t count = in.size();
  std::fill(in.begin(), in.end(), rank + 1);
  ncclResult_t r;
  int32_t want;
  if (c.op == "broadcast") {
    r = n.broadcast(in.data(), out.data(), count, ncclInt32, 0, comm, nullptr);
    want = 1;
  } else if (c.op == "allgather") {
    r = n.all_gather(in.data(), out.data(), count, ncclInt32, comm, nullptr);
    want = c.ranks;  // the last rank's block is checked below
  } else {
    r = n.all_reduce(in.data(), out.data(), count, ncclInt32, ncclSum, comm,
                     nullptr);
    want = c.ranks * (c.ranks + 1) / 2;
  }
  if (r != ncclSuccess) {
    std::fprintf(stderr, "rank %d: %s failed: %d\n", rank, c.op.c_str(), r);
    return false;
  }
  const size_t check_at = c.op == "allgather" ? out.size() - 1 : count - 1;
  if (out[check_at] != want || (c.op != "allgather" && out[0] != want)) {
    std::fprintf(stderr, "rank %d: %s gave %d, want %d\n", rank, c.op.c_str(),
                 out[check_at], want);
    return false;
  }
  return true;
}

// One rank's whole run; rank 0 writes its latencies (ns, as int64) to `fd`.
int RankMain(const Nccl& n, const ncclUniqueId& id, const Config& c, int rank,
             int fd) {
  ncclComm_t comm = nullptr;
  if (n.init_rank(&comm, c.ranks, id, rank) != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
    return 1;
  }
  const size_t count = std::max<size_t>(1, c.bytes / sizeof(int32_t));
  std::vector<int32_t> in(count);
  std::vector<int32_t> out(c.op == "allgather" ? count * c.ranks : count);
  std::vector<int64_t> ns;
  ns.reserve(c.iters);
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!RunOnce(n, comm, c, rank, in, out)) return 1;
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= c.warmup) {
      ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0)
                       .count());
    }
  }
  n.destroy(comm);
  if (rank == 0) {
    const size_t len = ns.size() * sizeof(int64_t);
    if (write(fd, ns.data(), len) != static_cast<ssize_t>(len)) return 1;
  }
  return 0;
}

// A runner process for one library: rank 0 plus forked ranks 1..n-1.
int RunnerMain(const std::string& lib, const Config& c, int fd) {
  Nccl n;
  if (!Load(lib, &n)) return 1;
  ncclUniqueId id;
  if (n.get_unique_id(&id) != ncclSuccess) return 1;
  std::vector<pid_t> pids;
  for (int r = 1; r < c.ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(RankMain(n, id, c, r, -1));
    pids.push_back(pid);
  }
  int rc = RankMain(n, id, c, 0, fd);
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

// Runs one library at one size in fresh processes; latencies in ns, sorted.
bool Measure(const std::string& lib, const Config& c,
             std::vector<int64_t>* ns) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    _exit(RunnerMain(lib, c, fds[1]));
  }
  close(fds[1]);
  ns->assign(c.iters, 0);
  const size_t want = ns->size() * sizeof(int64_t);
  size_t got = 0;
  auto* p = reinterpret_cast<char*>(ns->data());
  while (got < want) {
    const ssize_t k = read(fds[0], p + got, want - got);
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != want || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s: run failed (%zu of %zu bytes back)\n",
                 lib.c_str(), got, want);
    return false;
  }
  std::sort(ns->begin(), ns->end());
  return true;
}

double Us(const std::vector<int64_t>& sorted, double q) {
  return sorted[static_cast<size_t>(q * (sorted.size() - 1))] / 1e3;
}

double MeanUs(const std::vector<int64_t>& ns) {
  double sum = 0;
  for (int64_t v : ns) sum += v;
  return sum / ns.size() / 1e3;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU NCCL backend: small-message collective latency"};
  std::string lib, baseline, bytes_list = "4,1024,65536";
  int rounds = 3;
  Config c;
  app.add_option("--lib", lib, "libnccl.so.2 to measure")->required();
  app.add_option("--baseline", baseline, "libnccl.so.2 to compare against");
  app.add_option("--ranks", c.ranks, "ranks (processes)");
  app.add_option("--bytes", bytes_list, "message sizes in bytes, comma list");
  app.add_option("--iters", c.iters, "timed calls per run");
  app.add_option("--rounds", rounds, "runs per library and size");
  app.add_option("--op", c.op, "allreduce, broadcast or allgather")
      ->check(CLI::IsMember({"allreduce", "broadcast", "allgather"}));
  CLI11_PARSE(app, argc, argv);
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(bytes_list, ',')) {
    size_t b = 0;
    if (!absl::SimpleAtoi(s, &b) || b == 0) {
      std::fprintf(stderr, "--bytes: bad size '%s'\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(b);
  }
  std::vector<std::string> libs = {lib};
  if (!baseline.empty()) libs.insert(libs.begin(), baseline);
  std::printf("%s, %d ranks, %d calls per run, per-call latency\n",
              c.op.c_str(), c.ranks, c.iters);
  std::printf("%10s %6s %10s %10s %10s %10s %10s\n", "bytes", "round",
              "library", "p10_us", "p50_us", "p90_us", "mean_us");
  for (size_t b : sizes) {
    c.bytes = b;
    std::vector<std::vector<double>> p50(libs.size()), mean(libs.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t l = 0; l < libs.size(); ++l) {
        std::vector<int64_t> ns;
        if (!Measure(libs[l], c, &ns)) return 1;
        p50[l].push_back(Us(ns, 0.5));
        mean[l].push_back(MeanUs(ns));
        std::printf("%10zu %6d %10s %10.1f %10.1f %10.1f %10.1f\n", b, r,
                    l + 1 == libs.size() ? "lib" : "baseline", Us(ns, 0.1),
                    Us(ns, 0.5), Us(ns, 0.9), MeanUs(ns));
      }
    }
    if (libs.size() == 2) {
      // Medians over the rounds.
      const double b50 = Median(p50[0]), l50 = Median(p50[1]);
      const double bmean = Median(mean[0]), lmean = Median(mean[1]);
      std::printf(
          "%10zu  p50: baseline %.1f us, lib %.1f us (%.2fx); "
          "mean: baseline %.1f us, lib %.1f us (%.2fx)\n",
          b, b50, l50, b50 / l50, bmean, lmean, bmean / lmean);
    }
  }
  return 0;
}
