// LivePlanner: inputs and queries. Planning itself is in
// live_planner_run.cc.
#include "src/controller/planning/live_planner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/c4p/plan_codec.h"
#include "src/controller/planning/flow_inputs.h"

namespace pitstop::controller {
namespace {

// Connections tracked over all jobs; beyond, new ones are not planned
// (a 16,384-GPU job with 32 channels is 1 M send connections).
constexpr size_t kMaxConnections = size_t{1} << 21;
// Path directives awaiting an ack, and acks awaiting their Sent(): an
// agent that never acks (or acks what was never sent) keeps at most this
// many.
constexpr size_t kMaxUnacked = 4096;

}  // namespace

std::string NicName(const c4p::Fabric& fabric, int gpu) {
  const c4p::FabricNode& n = fabric.node(gpu);
  return absl::StrCat(fabric.hosts()[n.host].name, "/nic", n.local);
}

namespace {}  // namespace

absl::StatusOr<std::unique_ptr<LivePlanner>> LivePlanner::Create(
    Options options) {
  if (options.fabric.empty()) {
    return absl::InvalidArgumentError("fabric: empty (planning needs one)");
  }
  absl::StatusOr<c4p::Fabric> fabric =
      c4p::LoadFabric(options.fabric, options.csv);
  if (!fabric.ok()) return fabric.status();
  std::unique_ptr<LivePlanner> p(
      new LivePlanner(std::move(options), std::move(*fabric)));
  if (p->options_.store != nullptr) {
    absl::StatusOr<std::vector<StoredPlan>> stored = p->options_.store->Plans();
    if (!stored.ok()) return stored.status();
    MutexLock lock(&p->mu_);
    for (const StoredPlan& s : *stored) p->jobs_[s.job_id].epoch = s.epoch;
  }
  return p;
}

LivePlanner::LivePlanner(Options options, c4p::Fabric fabric)
    : options_(std::move(options)),
      base_(std::move(fabric)),
      hosts_(base_),
      work_(base_),
      cora_(options_.cora) {
  MutexLock lock(&mu_);
  gbps_.reserve(base_.links().size());
  for (const c4p::FabricLink& l : base_.links()) gbps_.push_back(l.gbps);
}

const std::string& LivePlanner::fabric_description() const {
  return base_.description;
}

const std::vector<std::string>& LivePlanner::fabric_warnings() const {
  return base_.warnings();
}

int LivePlanner::GpuOf(const Member& m) const {
  const int h = hosts_.Find(m.host);
  if (h < 0 || m.device < 0) return -1;
  const std::vector<int>& gpus = base_.hosts()[h].gpus;
  return m.device < static_cast<int>(gpus.size()) ? gpus[m.device] : -1;
}

void LivePlanner::ObserveBatch(const std::string& host,
                               const v1::ConnectRequest& batch) {
  if (batch.communicators_size() == 0 && batch.summaries_size() == 0) return;
  MutexLock lock(&mu_);
  for (const v1::CommunicatorInfo& c : batch.communicators()) {
    if (c.comm_hash() == 0 || c.rank() < 0) continue;
    CommState& cs = comms_[c.comm_hash()];
    if (!c.job_id().empty()) cs.job = c.job_id();
    cs.n_ranks = std::max(cs.n_ranks, c.n_ranks());
    cs.n_nodes = std::max(cs.n_nodes, c.n_nodes());
    cs.members[c.rank()] =
        Member{c.host().empty() ? host : c.host(), c.cuda_device()};
  }
  for (const v1::CollectiveSummary& s : batch.summaries()) {
    ObserveSummary(host, s);
  }
}

void LivePlanner::ObserveSummary(const std::string& host,
                                 const v1::CollectiveSummary& s) {
  if (s.connections_size() == 0) return;
  auto cit = comms_.find(s.comm_hash());
  if (cit == comms_.end() || cit->second.job.empty()) return;
  CommState& cs = cit->second;
  cs.channels = std::max(cs.channels, s.n_channels());
  JobInput& job = jobs_[cs.job];
  const absl::Time now = options_.clock->Now();
  uint64_t nic_bytes = 0;
  uint64_t nic_busy = 0;
  const std::vector<double> bytes = ConnectionBytes(s, cs.n_ranks);
  for (int i = 0; i < s.connections_size(); ++i) {
    const v1::ConnectionSummary& c = s.connections(i);
    if (!c.is_send() || c.peer_rank() < 0) continue;
    const ConnKey key{s.comm_hash(), s.rank(), c.peer_rank(),
                      static_cast<int>(c.channel_id())};
    auto [it, added] = job.conns.try_emplace(key);
    if (added) {
      if (connections_ >= kMaxConnections) {
        job.conns.erase(it);
        continue;
      }
      ++connections_;
      job.dirty = true;
      job.changed = now;
      ++job.version;
    }
    if (!added && it->second.bytes <= 0 && bytes[i] > 0) {
      // Sized only now (the first summaries of a job can carry no bytes):
      // a plan made without its load is re-made in full once this settles.
      job.dirty = true;
      job.changed = now;
      ++job.version;
    }
    it->second.bytes = bytes[i];
    it->second.throughput_bps = c.throughput_bps();
    auto peer = cs.members.find(c.peer_rank());
    if (peer != cs.members.end() && peer->second.host != host) {
      nic_bytes += c.bytes();
      nic_busy = std::max(nic_busy, c.duration_ns());
    }
  }
  if (!options_.measure_nics || nic_bytes == 0) return;
  auto self = cs.members.find(s.rank());
  if (self == cs.members.end()) return;
  const int gpu = GpuOf(self->second);
  if (gpu < 0 || base_.nic_uplinks(gpu).empty()) return;
  double nominal = 0;
  for (int up : base_.nic_uplinks(gpu)) nominal += base_.link(up).nominal_gbps;
  cora_.Observe(NicName(base_, gpu), nominal, nic_bytes, nic_busy);
}

std::vector<int> LivePlanner::LinksOfFault(const v1::Fault& f) {
  std::vector<int> links;
  if (f.suspects_size() == 0) return links;
  const v1::Suspect& s = f.suspects(0);
  auto cit = comms_.find(f.comm_hash());
  if (s.level() == v1::SUSPECT_LEVEL_NIC) {
    Member m{s.host(), s.gpu_index()};
    if (m.device < 0 && cit != comms_.end()) {
      auto mit = cit->second.members.find(s.comm_rank());
      if (mit != cit->second.members.end()) m.device = mit->second.device;
    }
    const int gpu = GpuOf(m);
    if (gpu < 0) return links;
    for (int up : base_.nic_uplinks(gpu)) {
      links.push_back(up);
      links.push_back(up ^ 1);
    }
    return links;
  }
  if (s.level() != v1::SUSPECT_LEVEL_LINK || cit == comms_.end()) return links;
  // The connection's planned paths: their switch-to-switch links (or, on
  // a path that never leaves a ToR, its NIC links), both directions. Its
  // channels take different paths; the verdict names the connection, so
  // the channels measured slowest (within 20% of the slowest) say which.
  auto pit = plans_.find(cit->second.job);
  if (pit == plans_.end()) return links;
  const JobPlan& p = *pit->second;
  const JobInput& in = jobs_[cit->second.job];
  std::vector<std::pair<const c4p::Flow*, double>> slow;
  double min_bps = 0;
  for (const c4p::Flow& fl : p.flows) {
    const ConnKey& k = p.conns[fl.conn];
    const bool pair = (k.src == s.comm_rank() && k.dst == s.peer_comm_rank()) ||
                      (k.dst == s.comm_rank() && k.src == s.peer_comm_rank());
    if (k.comm != f.comm_hash() || !pair || !fl.network) continue;
    auto c = in.conns.find(k);
    const double bps = c == in.conns.end() ? 0 : c->second.throughput_bps;
    if (bps > 0 && (min_bps == 0 || bps < min_bps)) min_bps = bps;
    slow.emplace_back(&fl, bps);
  }
  std::vector<int> nic_links;
  for (const auto& [fl, bps] : slow) {
    if (bps > 0 && bps > 1.2 * min_bps) continue;
    for (int l : p.plan.paths[fl->id].links) {
      std::vector<int>* to =
          base_.link(l).kind == c4p::LinkKind::kFabric ? &links : &nic_links;
      to->push_back(l & ~1);
      to->push_back(l | 1);
    }
  }
  if (links.empty()) links.swap(nic_links);
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

void LivePlanner::ObserveFault(const v1::Fault& f) {
  if (f.fault_class() != v1::FAULT_CLASS_COMM_SLOW) return;
  MutexLock lock(&mu_);
  if (f.state() == v1::FAULT_STATE_RESOLVED) {
    if (faults_marked_.erase(f.fault_id()) == 0) return;
    for (auto it = marks_.begin(); it != marks_.end();) {
      it = it->second.fault_id == f.fault_id() ? marks_.erase(it) : ++it;
    }
    links_dirty_ = true;
    return;
  }
  if (faults_marked_.count(f.fault_id())) return;
  const std::vector<int> links = LinksOfFault(f);
  if (links.empty()) return;  // not placed yet; the next update tries again
  faults_marked_.insert(f.fault_id());
  const std::string reason =
      absl::StrCat("fault ", f.fault_id(), " (COMM_SLOW): ", f.summary());
  for (int l : links) {
    Mark& m = marks_[l];
    if (m.health == v1::LINK_HEALTH_DEGRADED) continue;  // operator's
    m = Mark{options_.suspect_share, v1::LINK_HEALTH_SUSPECT, reason,
             f.fault_id()};
  }
  links_dirty_ = true;
  Logger("planner")->info(
      "fault {} names {} links{}: {} marked suspect", f.fault_id(),
      links.size(),
      links.empty() ? "" : " (first " + base_.LinkName(links[0]) + ")",
      f.job_id());
}

absl::StatusOr<std::vector<v1::LinkStatus>> LivePlanner::SetLinkHealth(
    const v1::SetLinkHealthRequest& r) {
  if (r.link().empty()) {
    return absl::InvalidArgumentError(
        "link: empty (A->B, A-B, hostN/nicK or a switch name)");
  }
  absl::StatusOr<std::vector<int>> links = base_.FindLinks(r.link());
  if (!links.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("link: ", links.status().message()));
  }
  const double share =
      r.capacity_share() == 0 ? options_.degraded_share : r.capacity_share();
  if (r.degraded() && !(share > 0 && share < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capacity_share: ", r.capacity_share(), " is outside (0, 1)"));
  }
  const std::string reason =
      absl::StrCat(r.who().empty() ? "operator" : r.who(),
                   r.reason().empty() ? "" : ": ", r.reason());
  std::vector<v1::LinkStatus> out;
  MutexLock lock(&mu_);
  for (int l : *links) {
    if (r.degraded()) {
      marks_[l] = Mark{share, v1::LINK_HEALTH_DEGRADED, reason, ""};
    } else {
      marks_.erase(l);
    }
  }
  links_dirty_ = true;
  for (int l : *links) out.push_back(LinkStatusOf(l));
  Logger("planner")->warn("link {} marked {} by {}", r.link(),
                          r.degraded() ? "degraded" : "healthy", reason);
  return out;
}

void LivePlanner::Sent(const std::string& host, uint64_t command_id,
                       const v1::PathDirective& d) {
  MutexLock lock(&mu_);
  Delivery& del = delivery_[d.job_id()][host];
  del.sent = std::max(del.sent, d.epoch());
  if (early_acks_.erase({host, command_id}) > 0) {
    del.acked = std::max(del.acked, d.epoch());
    return;
  }
  unacked_[{host, command_id}] = SentCommand{d.job_id(), d.epoch()};
  // Bounded: an agent that never acks keeps at most this many.
  while (unacked_.size() > kMaxUnacked) unacked_.erase(unacked_.begin());
}

void LivePlanner::Acked(const std::string& host, uint64_t command_id) {
  MutexLock lock(&mu_);
  auto it = unacked_.find({host, command_id});
  if (it == unacked_.end()) {
    if (!early_acks_.insert({host, command_id}).second) return;
    early_ack_order_.emplace_back(host, command_id);
    while (early_ack_order_.size() > kMaxUnacked) {
      early_acks_.erase(early_ack_order_.front());
      early_ack_order_.pop_front();
    }
    return;
  }
  Delivery& del = delivery_[it->second.job][host];
  del.acked = std::max(del.acked, it->second.epoch);
  unacked_.erase(it);
}

v1::LinkStatus LivePlanner::LinkStatusOf(int l) const {
  const c4p::FabricLink& fl = base_.link(l);
  v1::LinkStatus s;
  s.set_name(base_.LinkName(l));
  s.set_kind(c4p::LinkKindName(fl.kind));
  s.set_nominal_gbps(fl.nominal_gbps);
  s.set_gbps(gbps_[l]);
  auto it = marks_.find(l);
  // A mark applies at the next planning pass; report what it will be.
  if (it != marks_.end()) {
    s.set_gbps(std::min(gbps_[l], it->second.share * fl.nominal_gbps));
  } else if (fl.kind != c4p::LinkKind::kNic) {
    s.set_gbps(fl.nominal_gbps);  // only marks lower switch links
  }
  if (it != marks_.end()) {
    s.set_health(it->second.health);
    s.set_reason(it->second.reason);
  } else if (fl.kind == c4p::LinkKind::kNic &&
             gbps_[l] < fl.nominal_gbps * options_.planner.degraded_below) {
    s.set_health(v1::LINK_HEALTH_SLOW);
    s.set_reason("Cora: measured NIC throughput below nominal");
  } else {
    s.set_health(v1::LINK_HEALTH_HEALTHY);
  }
  return s;
}

absl::StatusOr<v1::FlowPlan> LivePlanner::GetFlowPlan(const std::string& job_id,
                                                      bool summary_only) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: empty");
  MutexLock lock(&mu_);
  auto it = plans_.find(job_id);
  if (it == plans_.end()) {
    auto jit = jobs_.find(job_id);
    if (jit == jobs_.end() || jit->second.conns.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "job ", job_id,
          " has no flow plan: no connections learned (unknown job, or its "
          "ranks report no proxy ops)"));
    }
    return absl::NotFoundError(absl::StrCat(
        "job ", job_id, " has no flow plan yet: ", jit->second.conns.size(),
        " connections learned; planned once none is new for ",
        absl::FormatDuration(options_.settle),
        " and their ranks are placed on the fabric"));
  }
  const JobPlan& p = *it->second;
  v1::FlowPlan out = p.info;
  for (const auto& [host, d] : delivery_[job_id]) {
    v1::FlowPlanHost* h = out.add_hosts();
    h->set_host(host);
    h->set_epoch_sent(d.sent);
    h->set_epoch_acked(d.acked);
  }
  if (summary_only) return out;
  const JobInput& in = jobs_[job_id];
  for (const c4p::Flow& f : p.flows) {
    if (!f.network) continue;
    const ConnKey& k = p.conns[f.conn];
    const c4p::PlannedPath& path = p.plan.paths[f.id];
    v1::PlannedFlow* pf = out.add_planned_flows();
    pf->set_comm_hash(k.comm);
    pf->set_channel(k.channel);
    pf->set_src_rank(k.src);
    pf->set_dst_rank(k.dst);
    const CommState& cs = comms_[k.comm];
    auto host_of = [&](int r) {
      auto m = cs.members.find(r);
      return m == cs.members.end() ? std::string() : m->second.host;
    };
    pf->set_src_host(host_of(k.src));
    pf->set_dst_host(host_of(k.dst));
    auto nic = [&](int gpu) { return NicName(base_, gpu); };
    pf->set_src_nic(nic(path.src_gpu >= 0 ? path.src_gpu : f.src_gpu));
    pf->set_dst_nic(nic(path.dst_gpu >= 0 ? path.dst_gpu : f.dst_gpu));
    for (int l : path.links) pf->add_path(base_.LinkName(l));
    pf->set_udp_src_port(path.src_port);
    auto cit = in.conns.find(k);
    pf->set_bytes(cit != in.conns.end() ? cit->second.bytes : f.bytes);
    pf->set_moved(p.moved[f.id] != 0);
  }
  return out;
}

absl::StatusOr<v1::FlowPlan> LivePlanner::StoredFlowPlan(
    const std::string& job_id, bool summary_only) const {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: empty");
  if (options_.store == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, ": no store to read a plan from"));
  }
  absl::StatusOr<std::vector<StoredPlan>> stored = options_.store->Plans();
  if (!stored.ok()) return stored.status();
  const StoredPlan* sp = nullptr;
  for (const StoredPlan& x : *stored) {
    if (x.job_id == job_id) sp = &x;
  }
  if (sp == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " has no flow plan in the store (plans/",
                     job_id, "): the leader has not planned it"));
  }
  absl::StatusOr<c4p::FlowPlan> p = c4p::DecodePlan(sp->data);
  if (!p.ok()) {
    return absl::DataLossError(absl::StrCat("stored plan of job ", job_id, ": ",
                                            p.status().message()));
  }
  const int n_links = static_cast<int>(base_.links().size());
  auto bad_link = [&](int l) { return l < 0 || l >= n_links; };
  v1::FlowPlan out;
  out.set_job_id(job_id);
  out.set_epoch(sp->epoch);
  out.set_fabric(base_.description);
  out.set_reason(absl::StrCat("stored plan (epoch ", sp->epoch,
                              ") read by a follower; the leader has the "
                              "live plan"));
  uint32_t network = 0;
  for (const c4p::PlannedPath& path : p->paths) {
    for (int l : path.links) {
      if (bad_link(l)) {
        return absl::DataLossError(absl::StrCat(
            "stored plan of job ", job_id, ": link ", l,
            " is not on this controller's fabric (", base_.description,
            "); was it planned on another --fabric?"));
      }
    }
    if (path.links.empty() ||
        base_.link(path.links.front()).kind != c4p::LinkKind::kNic) {
      continue;  // NVLink flows: no network path to show
    }
    ++network;
    if (summary_only) continue;
    v1::PlannedFlow* pf = out.add_planned_flows();
    const int src =
        path.src_gpu >= 0 ? path.src_gpu : base_.link(path.links.front()).src;
    const int dst =
        path.dst_gpu >= 0 ? path.dst_gpu : base_.link(path.links.back()).dst;
    pf->set_src_host(base_.hosts()[base_.node(src).host].name);
    pf->set_dst_host(base_.hosts()[base_.node(dst).host].name);
    pf->set_src_nic(NicName(base_, src));
    pf->set_dst_nic(NicName(base_, dst));
    for (int l : path.links) pf->add_path(base_.LinkName(l));
    pf->set_udp_src_port(path.src_port);
    pf->set_src_rank(-1);
    pf->set_dst_rank(-1);
    pf->set_channel(-1);
  }
  out.set_flows(static_cast<uint32_t>(p->paths.size()));
  out.set_network_flows(network);
  return out;
}

v1::ListLinksResponse LivePlanner::ListLinks(const v1::ListLinksRequest& r) {
  v1::ListLinksResponse out;
  out.set_fabric(base_.description);
  MutexLock lock(&mu_);
  const size_t n = base_.links().size();
  std::vector<uint32_t> flows(n, 0);
  std::vector<double> bps(n, 0);
  std::vector<std::set<std::string>> jobs(n);
  for (const auto& entry : plans_) {
    // Not a structured binding: clang 14 cannot capture one in the lambda.
    const std::string& job = entry.first;
    const auto& p = entry.second;
    if (!r.job_id().empty() && job != r.job_id()) continue;
    const JobInput& in = jobs_[job];
    for (const c4p::Flow& f : p->flows) {
      if (!f.network) continue;
      auto cit = in.conns.find(p->conns[f.conn]);
      const double rate =
          cit == in.conns.end() ? 0 : cit->second.throughput_bps * 8;
      c4p::ForEachPart(p->plan.paths[f.id], rate,
                       [&](const std::vector<int>& links, double share) {
                         for (int l : links) {
                           ++flows[l];
                           bps[l] += share;
                           jobs[l].insert(job);
                         }
                       });
    }
  }
  for (size_t l = 0; l < n; ++l) {
    const bool marked = marks_.count(static_cast<int>(l)) != 0;
    const bool slow =
        gbps_[l] < base_.link(l).nominal_gbps * options_.planner.degraded_below;
    if (flows[l] == 0 && !marked && !slow && !r.all()) continue;
    if (base_.link(l).kind == c4p::LinkKind::kNvLink && flows[l] == 0 &&
        !r.all()) {
      continue;
    }
    v1::LinkStatus s = LinkStatusOf(static_cast<int>(l));
    s.set_flows(flows[l]);
    if (gbps_[l] > 0) s.set_utilisation(bps[l] / (gbps_[l] * 1e9));
    for (const std::string& j : jobs[l]) s.add_jobs(j);
    *out.add_links() = std::move(s);
  }
  return out;
}

}  // namespace pitstop::controller
