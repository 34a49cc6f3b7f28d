// `pitstop tuner-table`: what libnccl-tuner-pitstop.so on this node sees
// (docs/planning.md, "The tuner table"): the per-node table the agent
// writes, one line (or JSON object) per steered communicator.
//
//   pitstop tuner-table                     $PITSTOP_TUNER_TABLE or the default
//   pitstop tuner-table /dev/shm/t -o json
//
// Exit codes: 0 read, 2 usage error or no readable table (the error names
// the path).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "pitstop/tuner_table.h"
#include "tools/pitstop/commands.h"

namespace pitstop::tool {
namespace {

struct TunerTableArgs {
  std::string path;
  std::string output = "table";
};

std::vector<std::string> Names(uint32_t mask, const char* const* names, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    if ((mask >> i) & 1) out.push_back(names[i]);
  }
  return out;
}

constexpr const char* kAlgoNames[] = {
    "TREE",      "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS",
    "NVLS_TREE", "PAT"};
constexpr const char* kProtoNames[] = {"LL", "LL128", "SIMPLE"};

std::string Join(const std::vector<std::string>& v) {
  if (v.empty()) return "all";
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

int RunTunerTable(const TunerTableArgs& a) {
  std::string error;
  std::unique_ptr<tuner::TunerTableReader> r =
      tuner::TunerTableReader::Open(a.path, &error);
  if (r == nullptr) {
    std::cerr << "pitstop tuner-table: " << error << "\n";
    return 2;
  }
  const std::vector<tuner::Steering> entries = r->Entries();
  if (a.output == "json") {
    nlohmann::json list = nlohmann::json::array();
    for (const tuner::Steering& s : entries) {
      list.push_back(
          {{"comm_id", absl::StrFormat("0x%016x", s.comm_id)},
           {"plan_epoch", s.plan_epoch},
           {"n_ranks", s.n_ranks},
           {"n_nodes", s.n_nodes},
           {"max_channels", s.max_channels},
           {"min_channels", s.min_channels},
           {"algorithms", Names(s.algo_mask, kAlgoNames, tuner::kNumAlgos)},
           {"protocols", Names(s.proto_mask, kProtoNames, tuner::kNumProtos)},
           {"shape_unique", (s.flags & tuner::kFlagShapeUnique) != 0}});
    }
    nlohmann::json j = {{"path", r->path()},
                        {"generation", r->generation()},
                        {"retired", r->retired()},
                        {"entries", list}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "%s: generation %d%s, %d steered communicator(s)\n", r->path(),
      r->generation(), r->retired() ? " (retired: the agent replaced it)" : "",
      entries.size());
  if (entries.empty()) return 0;
  std::cout << absl::StrFormat("%-18s %6s %6s %5s %9s %-22s %s\n", "COMM",
                               "EPOCH", "RANKS", "NODES", "CHANNELS",
                               "ALGORITHMS", "PROTOCOLS");
  for (const tuner::Steering& s : entries) {
    std::cout << absl::StrFormat(
        "0x%016x %6d %6d %5d %4d..%-4d %-22s %s%s\n", s.comm_id, s.plan_epoch,
        s.n_ranks, s.n_nodes, s.min_channels, s.max_channels,
        Join(Names(s.algo_mask, kAlgoNames, tuner::kNumAlgos)),
        Join(Names(s.proto_mask, kProtoNames, tuner::kNumProtos)),
        (s.flags & tuner::kFlagShapeUnique) ? " (shape unique)" : "");
  }
  return 0;
}

}  // namespace

void AddTunerTableCommand(CLI::App* app, int* exit_code) {
  auto args = std::make_shared<TunerTableArgs>();
  CLI::App* cmd = app->add_subcommand(
      "tuner-table",
      "Print the per-node tuner table the agent writes and "
      "libnccl-tuner-pitstop.so reads: which communicators are steered "
      "(channels 0 = NCCL's; algorithms/protocols 'all' = NCCL's choice).");
  cmd->add_option("path", args->path,
                  "table file (default: $PITSTOP_TUNER_TABLE, else " +
                      std::string(tuner::kDefaultTablePath) + ")");
  cmd->add_option("-o,--output", args->output, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->callback([args, exit_code] { *exit_code = RunTunerTable(*args); });
}

}  // namespace pitstop::tool
