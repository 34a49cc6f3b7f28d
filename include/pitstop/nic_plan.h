// The per-node NIC plan: how a flow plan's NIC set reaches NCCL when a
// communicator is created (docs/planning.md, "How a plan reaches NCCL",
// path 1).
//
// The node agent writes, per communicator of its directives
// (v1::CommSteering), the NIC indices the planned flows of this host's
// members leave through. The LD_PRELOAD interposer reads it in its
// ncclCommInitRank* wrappers, before NCCL's own init, and hands that init
// a topology file (NCCL_TOPO_FILE) in which the host's other NICs are
// demoted (see FilterTopologyXml), restoring the variable afterwards.
//
// File: beside the tuner table, `<tuner table path>.nics` (default
// /run/pitstop/tuner-table.nics), or $PITSTOP_NIC_PLAN. Text, written
// whole and renamed over the path (a reader sees the old or the new file),
// mode 0644:
//
//   pitstop-nic-plan 1
//   comm 0x1a2b3c4d5e6f7788 job job42 epoch 3 ranks 16 nodes 2 unique 1 nics
//   0,2
//
// One line per communicator; `unique 1` when no other communicator of the
// file has the same (ranks, nodes) shape. A communicator being created is
// matched by its comm hash when it is known before init (NCCL computes it
// from the unique id: a communicator rebuilt from the same id), else by its
// rank count among the lines of its job whose shape is unique.
//
// Like the tuner table this links only libc and libstdc++ (the interposer
// runs in the user's container); errors are strings.
#ifndef PITSTOP_NIC_PLAN_H_
#define PITSTOP_NIC_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pitstop::nicplan {

inline constexpr char kNicPlanEnv[] = "PITSTOP_NIC_PLAN";
inline constexpr char kNicPlanSuffix[] = ".nics";
// The interposer's base topology (a full NCCL topology XML of the node, e.g.
// one NCCL wrote with NCCL_TOPO_DUMP_FILE), when the user set no
// NCCL_TOPO_FILE of their own.
inline constexpr char kBaseTopoEnv[] = "PITSTOP_NCCL_TOPO_BASE";
// NCCL's default topology location (read when NCCL_TOPO_FILE is unset).
inline constexpr char kNcclDefaultTopo[] =
    "/var/run/nvidia-topologyd/virtualTopology.xml";
// The speed (Mb/s) a NIC outside the plan gets in the filtered topology.
inline constexpr int kDemotedSpeedMbps = 1;

struct NicPlanEntry {
  uint64_t comm_id = 0;  // NCCL's commHash; 0 = unknown
  std::string job;
  uint64_t epoch = 0;
  int n_ranks = 0;
  int n_nodes = 0;
  bool unique_shape = false;
  std::vector<int> nics;  // NIC indices on this host (rails), ascending
};

// `configured` if set, else $PITSTOP_NIC_PLAN, else `tuner_table` (resolved
// as the tuner does) + ".nics".
std::string ResolveNicPlanPath(const std::string& configured,
                               const std::string& tuner_table);

std::string FormatNicPlan(const std::vector<NicPlanEntry>& entries);
// False with "line N: ..." for text FormatNicPlan did not produce.
bool ParseNicPlan(const std::string& text, std::vector<NicPlanEntry>* out,
                  std::string* error);
// Writes a temporary file beside `path` and renames it over `path`.
bool WriteNicPlan(const std::string& path,
                  const std::vector<NicPlanEntry>& entries, std::string* error);
// A plan holds one line per communicator of the node's directives (a few
// hundred bytes each); a larger file is refused.
inline constexpr size_t kMaxNicPlanBytes = size_t{1} << 20;
// Reads and parses `path`; false with the path in the error. Refuses a
// file tuner::CheckTrustedFile refuses, and one over kMaxNicPlanBytes.
bool ReadNicPlan(const std::string& path, std::vector<NicPlanEntry>* out,
                 std::string* error);

// The entry for a communicator being created: the one with `comm_id` if
// any (comm_id 0: unknown), else the one line of `job` (any job when `job`
// is empty) with `n_ranks` ranks and a unique shape. Null when none
// matches or the match is ambiguous.
const NicPlanEntry* MatchNicPlan(const std::vector<NicPlanEntry>& entries,
                                 const std::string& job, uint64_t comm_id,
                                 int n_ranks);

// NCCL's commHash of a communicator made from `id` (128 bytes):
// NCCL's getHash over the unique id (init.cc: commHash =
// getHash(commId.internal, NCCL_UNIQUE_ID_BYTES)), DJB2a.
uint64_t CommHashOfUniqueId(const char* id, int bytes);

// Rewrites an NCCL topology XML so that NCCL prefers the NICs in `keep`:
// every <net> element whose index (its `dev` attribute, else its order
// among the <net> elements) is not in `keep` gets speed="1" (Mb/s; NCCL
// keeps a speed the file gives: ncclTopoPopulateNics only fills an absent
// one), the others are left as they are. NCCL cannot be told through the
// topology to drop a NIC its net plugin reports (it marks every reported
// NIC keep=1), but the graph search, highest bandwidth first, does not pick
// a 1 Mb/s NIC while a planned one reaches the GPU. `kept_names` gets the
// names of the <net>s kept. False (xml untouched) when no <net> element is
// in `keep` or the XML has no <net> at all.
bool FilterTopologyXml(const std::string& xml, const std::vector<int>& keep,
                       std::string* out, std::vector<std::string>* kept_names,
                       std::string* error);

}  // namespace pitstop::nicplan

#endif  // PITSTOP_NIC_PLAN_H_
