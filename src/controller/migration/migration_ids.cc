// The new communicators' ids of a migration: made by the controller (random
// bytes, for data planes that accept any id) or by the joiner's library
// (PHASE_MAKE_IDS; a real NCCL id holds the address of the process that
// made it, so only a process that lives through the init can make it).
#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/migration/migration_manager.h"

namespace pitstop::controller {
namespace {

constexpr size_t kCommIdBytes = 128;  // sizeof(ncclUniqueId)

const v1::MigrationMember* JoinerOf(const v1::Migration& m) {
  for (const v1::MigrationMember& mem : m.members()) {
    if (mem.role() == v1::MIGRATION_ROLE_JOINER) return &mem;
  }
  return nullptr;
}

// Why the joiner's ids cannot be used, or "" when every communicator and
// every moved rank got one id of the right size.
std::string CheckIds(const v1::Migration& m, const v1::MigrationAck& ack) {
  for (const v1::CommRebuild& c : m.comms()) {
    auto it = std::find_if(
        ack.made_comms().begin(), ack.made_comms().end(),
        [&](const auto& x) { return x.old_comm_hash() == c.old_comm_hash(); });
    if (it == ack.made_comms().end()) {
      return absl::StrCat("no id for communicator ", c.comm_name(), " (hash ",
                          c.old_comm_hash(), ")");
    }
    if (it->new_comm_id().size() != kCommIdBytes) {
      return absl::StrCat("the id for communicator ", c.comm_name(), " has ",
                          it->new_comm_id().size(), " bytes, not ",
                          kCommIdBytes);
    }
  }
  const v1::MigrationMember* joiner = JoinerOf(m);
  for (int32_t rank : joiner->global_ranks()) {
    auto it =
        std::find_if(ack.made_transfers().begin(), ack.made_transfers().end(),
                     [&](const auto& t) { return t.global_rank() == rank; });
    if (it == ack.made_transfers().end() ||
        it->comm_id().size() != kCommIdBytes) {
      return absl::StrCat("no ", kCommIdBytes,
                          "-byte transfer id for moved rank ", rank);
    }
  }
  return "";
}

}  // namespace

bool MigrationManager::AwaitingIds(const v1::Migration& m) {
  return m.state() == v1::MIGRATION_STATE_PREPARING && m.ids_from_joiner() &&
         m.ids_unix_ns() == 0;
}

void MigrationManager::AssignSources(v1::Migration* m) {
  std::vector<int32_t> replicas;
  for (const v1::MigrationMember& mem : m->members()) {
    if (mem.role() == v1::MIGRATION_ROLE_STAYER) {
      replicas.insert(replicas.end(), mem.global_ranks().begin(),
                      mem.global_ranks().end());
    }
  }
  std::sort(replicas.begin(), replicas.end());
  // Start checked there are enough: each replica serves one moved rank
  // (a rank's directive carries one transfer communicator).
  size_t next = 0;
  for (v1::TransferComm& t : *m->mutable_transfers()) {
    t.set_source_global_rank(m->from_replica() && next < replicas.size()
                                 ? replicas[next++]
                                 : t.global_rank());
  }
}

void MigrationManager::MakeIds(v1::Migration* m) {
  auto random_id = [this] {
    std::string id(kCommIdBytes, '\0');
    for (size_t i = 0; i < kCommIdBytes; i += 8) {
      const uint64_t r = rng_();
      std::copy_n(reinterpret_cast<const char*>(&r), 8, id.begin() + i);
    }
    return id;
  };
  for (v1::CommRebuild& c : *m->mutable_comms()) c.set_new_comm_id(random_id());
  m->clear_transfers();
  for (const v1::MigrationMember& mem : m->members()) {
    if (mem.role() != v1::MIGRATION_ROLE_LEAVER) continue;
    for (int32_t rank : mem.global_ranks()) {
      v1::TransferComm* t = m->add_transfers();
      t->set_global_rank(rank);
      t->set_comm_id(random_id());
    }
  }
  AssignSources(m);
}

void MigrationManager::OnIds(v1::Migration* m, const v1::MigrationAck& ack) {
  if (!ack.ok()) {
    AbortLocked(m,
                absl::StrCat("joiner ", m->joiner_host(), " failed MAKE_IDS: ",
                             ack.error().empty() ? "no reason" : ack.error()),
                AbortCause::kMemberFailed);
    return;
  }
  if (const std::string bad = CheckIds(*m, ack); !bad.empty()) {
    AbortLocked(m,
                absl::StrCat("joiner ", m->joiner_host(),
                             " answered MAKE_IDS with unusable ids: ", bad),
                AbortCause::kMemberFailed);
    return;
  }
  for (v1::CommRebuild& c : *m->mutable_comms()) {
    for (const v1::CommRebuild& x : ack.made_comms()) {
      if (x.old_comm_hash() == c.old_comm_hash()) {
        c.set_new_comm_id(x.new_comm_id());
      }
    }
  }
  const v1::MigrationMember* joiner = JoinerOf(*m);
  m->clear_transfers();
  for (int32_t rank : joiner->global_ranks()) {
    for (const v1::TransferComm& t : ack.made_transfers()) {
      if (t.global_rank() == rank) *m->add_transfers() = t;
    }
  }
  AssignSources(m);
  m->set_ids_unix_ns(NowUnixNs());
  Persist(*m, v1::WatchMigrationsResponse::CHANGE_UPDATED);
  SendToAll(m, /*abort_unreachable=*/true);
}

}  // namespace pitstop::controller
