// Driver: the live planner's cost at scale (docs/planning.md, "Live
// planner"). Feeds one ring communicator of --ranks ranks with --channels
// channels (one batch per host, as agents send them) on --fabric, plans it,
// then marks the plan's busiest switch link degraded and re-plans. Prints
// wall and CPU times of each step. Not run by ctest.
//
//   live_planner_bench --fabric gen:3tier,gpus=1024,tors_per_pod=16
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "pitstop/clock.h"
#include "src/controller/planning/live_planner.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

double CpuMs() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct Timer {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  double cpu = CpuMs();
  std::string Done() const {
    const double w = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - wall)
                         .count();
    return absl::StrCat(w, " ms wall, ", CpuMs() - cpu, " ms CPU");
  }
};

int Main(int argc, char** argv) {
  std::string fabric = "gen:3tier,gpus=1024,tors_per_pod=16";
  int ranks = 0;  // 0: every GPU
  int channels = 16;
  int gpus_per_host = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--fabric") fabric = argv[i + 1];
    if (k == "--ranks") ranks = std::atoi(argv[i + 1]);
    if (k == "--channels") channels = std::atoi(argv[i + 1]);
    if (k == "--gpus-per-host") gpus_per_host = std::atoi(argv[i + 1]);
  }
  FakeClock clock;
  auto store = FaultStore::Open(":memory:");
  if (!store.ok()) return 1;
  LivePlanner::Options o;
  o.fabric = fabric;
  o.clock = &clock;
  o.store = store->get();
  Timer load;
  auto p = LivePlanner::Create(o);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
    return 2;
  }
  std::printf("fabric %s: %s (loaded in %s)\n", fabric.c_str(),
              (*p)->fabric_description().c_str(), load.Done().c_str());
  if (ranks == 0) {
    auto f = c4p::LoadFabric(fabric, {});
    ranks = f.ok() ? f->gpu_count() : 0;
  }
  const int hosts = (ranks + gpus_per_host - 1) / gpus_per_host;
  Timer feed;
  for (int h = 0; h < hosts; ++h) {
    v1::ConnectRequest batch;
    for (int r = h * gpus_per_host;
         r < std::min(ranks, (h + 1) * gpus_per_host); ++r) {
      v1::CommunicatorInfo* c = batch.add_communicators();
      c->set_comm_hash(1);
      c->set_rank(r);
      c->set_n_ranks(ranks);
      c->set_host(absl::StrCat("host", h));
      c->set_cuda_device(r % gpus_per_host);
      c->set_job_id("bench");
      v1::CollectiveSummary* s = batch.add_summaries();
      s->set_comm_hash(1);
      s->set_rank(r);
      s->set_n_channels(channels);
      for (int ch = 0; ch < channels; ++ch) {
        v1::ConnectionSummary* cs = s->add_connections();
        cs->set_peer_rank((r + 1) % ranks);
        cs->set_channel_id(ch);
        cs->set_is_send(true);
        cs->set_bytes(64 << 20);
        cs->set_duration_ns(3'000'000);
      }
    }
    (*p)->ObserveBatch(absl::StrCat("host", h), batch);
  }
  std::printf("fed %d ranks x %d channels in %d host batches: %s\n", ranks,
              channels, hosts, feed.Done().c_str());
  clock.Advance(absl::Seconds(3));
  Timer full;
  LivePlanner::RunResult r = (*p)->Run();
  std::printf("full plan (epoch %llu, %zu directives): %s\n",
              static_cast<unsigned long long>(r.planned["bench"]),
              r.directives.size(), full.Done().c_str());
  absl::StatusOr<v1::FlowPlan> plan = (*p)->GetFlowPlan("bench", true);
  if (!plan.ok()) return 3;
  std::printf("  %u flows, %u network; busiest %s\n", plan->flows(),
              plan->network_flows(), plan->busiest_link().c_str());
  Timer idle;
  (*p)->Run();
  std::printf("a pass with nothing changed: %s\n", idle.Done().c_str());
  v1::SetLinkHealthRequest mark;
  const std::string b = plan->busiest_link();
  mark.set_link(b.substr(0, b.find("->")) + "-" + b.substr(b.find("->") + 2));
  mark.set_degraded(true);
  mark.set_capacity_share(0.25);
  if (!(*p)->SetLinkHealth(mark).ok()) return 4;
  Timer re;
  r = (*p)->Run();
  plan = (*p)->GetFlowPlan("bench", true);
  std::printf(
      "re-plan after %s at 25%% (epoch %llu): %s; %u crossing, %u moved\n",
      mark.link().c_str(), static_cast<unsigned long long>(plan->epoch()),
      re.Done().c_str(), plan->crossing_flows(), plan->moved_flows());
  return 0;
}

}  // namespace
}  // namespace pitstop::controller

int main(int argc, char** argv) {
  return pitstop::controller::Main(argc, argv);
}
