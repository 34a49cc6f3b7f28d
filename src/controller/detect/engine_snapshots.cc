// Snapshots of the engine's registry for the API.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "src/controller/detect/engine_impl.h"

namespace pitstop::controller {

namespace {

void Snapshot(const CommState& c, v1::Communicator* pc) {
  pc->set_comm_hash(c.comm_hash);
  pc->set_comm_name(c.comm_name);
  pc->set_job_id(c.job_id);
  pc->set_n_ranks(c.ExpectedRanks());
  pc->set_parent_comm_hash(c.parent_comm_hash);
  pc->set_collectives_joined(c.collectives_joined);
  int64_t completed = static_cast<int64_t>(c.last_joined_seq);
  for (const auto& [func, fp] : c.progress) {
    completed = std::max(completed, fp.min_completed);
  }
  pc->set_last_completed_seq(
      static_cast<uint64_t>(std::max<int64_t>(0, completed)));
  for (const auto& [r, m] : c.members) {
    v1::MemberLocation* loc = pc->add_members();
    loc->set_comm_rank(r);
    loc->set_global_rank(m.global_rank);
    loc->set_host(m.host);
    loc->set_pid(m.pid);
    loc->set_cuda_device(m.cuda_device);
    if (!m.nic.empty()) loc->add_nics(m.nic);
  }
}

}  // namespace

std::vector<v1::Communicator> EngineImpl::Communicators() const {
  std::vector<v1::Communicator> out;
  out.reserve(comms_.size());
  for (const auto& [hash, c] : comms_) Snapshot(c, &out.emplace_back());
  return out;
}

bool EngineImpl::GetCommunicator(uint64_t comm_hash,
                                 v1::Communicator* out) const {
  auto it = comms_.find(comm_hash);
  if (it == comms_.end()) return false;
  Snapshot(it->second, out);
  return true;
}

std::vector<v1::Job> EngineImpl::Jobs() const {
  struct Acc {
    std::set<std::string> hosts;
    std::set<int32_t> globals;
    int32_t max_ranks = 0;
    std::vector<uint64_t> comms;
  };
  std::map<std::string, Acc> jobs;
  for (const auto& [hash, c] : comms_) {
    Acc& a = jobs[c.job_id];
    a.comms.push_back(hash);
    a.max_ranks = std::max(a.max_ranks, c.ExpectedRanks());
    for (const auto& [r, m] : c.members) {
      if (!m.host.empty()) a.hosts.insert(m.host);
      if (m.global_rank >= 0) a.globals.insert(m.global_rank);
    }
  }
  std::vector<v1::Job> out;
  for (const auto& [id, a] : jobs) {
    v1::Job& j = out.emplace_back();
    j.set_job_id(id);
    j.set_n_ranks(std::max<uint32_t>(a.globals.size(), a.max_ranks));
    for (const std::string& h : a.hosts) j.add_hosts(h);
    for (uint64_t h : a.comms) j.add_comm_hashes(h);
    *j.mutable_policy() = GetJobPolicy(id);
    for (std::string& h : JobHosts(id)) j.add_scheduled_hosts(std::move(h));
  }
  return out;
}

EngineStats EngineImpl::stats() const {
  EngineStats s = stats_;
  s.communicators = static_cast<uint32_t>(comms_.size());
  s.pending_joins = 0;
  for (const auto& [hash, c] : comms_) s.pending_joins += c.pending.size();
  return s;
}

}  // namespace pitstop::controller
