#include "src/agent/local_tenants.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "pitstop/status_macros.h"

namespace pitstop::agent {
namespace {

// /proc files are small; a larger one is cut (environ: the job variables
// of a launcher come early, and a process cannot make the agent read more).
constexpr size_t kMaxProcFileBytes = 256 << 10;

// `ok` (if given): whether the file could be opened.
std::string ReadProcFile(const std::string& path, bool* ok = nullptr) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ok != nullptr) *ok = fd >= 0;
  if (fd < 0) return "";
  std::string out;
  std::array<char, 16384> buf;
  while (out.size() < kMaxProcFileBytes) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  close(fd);
  if (out.size() > kMaxProcFileBytes) out.resize(kMaxProcFileBytes);
  return out;
}

// "job_4711" of a Slurm cgroup path (".../job_4711/step_0/..."), or "".
std::string SlurmJobOf(absl::string_view cgroup_file) {
  // Only where slurmd puts a job, from the root of the hierarchy: a user
  // with a delegated subtree (systemd's user@UID.service, rootless
  // containers) can make a cgroup named job_N anywhere below it, never at
  // these places, which only root creates (attacker round 18, R18-3).
  //   cgroup v1: /slurm[_NODE]/uid_U/job_N/...
  //   cgroup v2: /system.slice/slurmstepd.scope/job_N/...
  auto is_job = [](absl::string_view part) {
    absl::string_view digits = part;
    uint64_t id = 0;
    return absl::ConsumePrefix(&digits, "job_") &&
           absl::SimpleAtoi(digits, &id);
  };
  for (absl::string_view line : absl::StrSplit(cgroup_file, '\n')) {
    // "hierarchy-id:controllers:path"; the path may itself hold ':'.
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    const std::vector<absl::string_view> parts = absl::StrSplit(fields[2], '/');
    if (parts.size() < 4 || !parts[0].empty()) continue;
    const bool v1 =
        (parts[1] == "slurm" || absl::StartsWith(parts[1], "slurm_")) &&
        absl::StartsWith(parts[2], "uid_");
    const bool v2 =
        parts[1] == "system.slice" && parts[2] == "slurmstepd.scope";
    if ((v1 || v2) && is_job(parts[3])) return std::string(parts[3]);
  }
  return "";
}

// The jobs the library may name from this environment (plugin/config.cc
// takes the first of these that is set and not empty; any of them is
// accepted, so a launcher that sets one more after another is not refused).
std::vector<std::string> JobsOfEnvironment(absl::string_view environ) {
  const absl::string_view names[] = {
      "PITSTOP_JOB_ID=", "SLURM_JOB_ID=", "TORCHELASTIC_RUN_ID="};
  std::vector<std::string> jobs;
  for (absl::string_view var : absl::StrSplit(environ, '\0')) {
    for (absl::string_view name : names) {
      if (absl::StartsWith(var, name) && var.size() > name.size()) {
        jobs.emplace_back(var.substr(name.size()));
      }
    }
  }
  return jobs;
}

// How strongly what the kernel knows of `who` names `job`: its Slurm
// cgroup, its environment (or, naming none, the library's fallback) from
// inside a Slurm cgroup or outside any.
LocalTenants::Evidence EvidenceFor(const ProcessIdentity& who,
                                   const std::string& job) {
  using Evidence = LocalTenants::Evidence;
  if (!who.cgroup_job.empty() && who.cgroup_job == absl::StrCat("job_", job)) {
    return Evidence::kCgroup;
  }
  const bool env =
      std::find(who.env_jobs.begin(), who.env_jobs.end(), job) !=
          who.env_jobs.end() ||
      (who.environ_read && who.env_jobs.empty() && job == kLibraryDefaultJob);
  if (!env) return Evidence::kUnverified;
  return who.cgroup_job.empty() ? Evidence::kEnvironment : Evidence::kScheduler;
}

std::string Quoted(absl::string_view s) {
  return absl::StrCat("'", s.substr(0, 64), "'");
}

// Removes the elements marked in `drop`, keeping the others' order;
// returns how many were removed.
template <typename T>
int EraseMarked(google::protobuf::RepeatedPtrField<T>* field,
                const std::vector<bool>& drop) {
  int kept = 0;
  for (int i = 0; i < field->size(); ++i) {
    if (drop[i]) continue;
    if (kept != i) field->SwapElements(kept, i);
    ++kept;
  }
  const int removed = field->size() - kept;
  field->DeleteSubrange(kept, removed);
  return removed;
}

// Whether a communicator record lists a global rank for another rank than
// its own (the library lists only its own: docs/plugin.md, RANK).
bool ListsOtherRanks(const v1::CommunicatorInfo& info) {
  for (int r = 0; r < info.global_ranks_size(); ++r) {
    if (r != info.rank() && info.global_ranks(r) >= 0) return true;
  }
  return false;
}

}  // namespace

uint64_t StartTicksOfStat(absl::string_view stat) {
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos) return 0;
  // Field 3 (state) is the first after the command name; 22 is starttime.
  const std::vector<absl::string_view> fields = absl::StrSplit(
      stat.substr(close + 1), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  uint64_t ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &ticks)) return 0;
  return ticks;
}

ProcessIdentity IdentifyProcess(const PeerCred& cred,
                                const std::string& proc_root) {
  ProcessIdentity id;
  if (cred.pid <= 0) return id;
  id.known = true;
  id.pid = cred.pid;
  id.uid = cred.uid;
  const std::string dir = absl::StrCat(proc_root, "/", cred.pid, "/");
  id.start_ticks = StartTicksOfStat(ReadProcFile(dir + "stat"));
  id.cgroup_job = SlurmJobOf(ReadProcFile(dir + "cgroup"));
  id.env_jobs =
      JobsOfEnvironment(ReadProcFile(dir + "environ", &id.environ_read));
  return id;
}

absl::StatusOr<LocalTenants::Standing> LocalTenants::CheckJob(
    const ProcessIdentity& who, const std::string& job, bool* take_over) {
  *take_over = false;
  if (!who.env_jobs.empty() &&
      std::find(who.env_jobs.begin(), who.env_jobs.end(), job) ==
          who.env_jobs.end()) {
    std::string named;
    for (const std::string& j : who.env_jobs) {
      absl::StrAppend(&named, named.empty() ? "" : ", ", Quoted(j));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "hello.job_id ", Quoted(job),
        " is not a job the process's environment names (", named, ")"));
  }
  // No job named: nothing to protect but the ranks (checked apart).
  if (job.empty()) return Standing::kMember;
  const Evidence evidence =
      who.known ? EvidenceFor(who, job) : Evidence::kUnverified;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    // Where the operator named the uids that run jobs, a process of another
    // uid proves no job by its environment alone: without a scheduler's
    // cgroup it is an anonymous tenant (R18-7).
    if (who.known && evidence < Evidence::kScheduler &&
        !options_.job_uids.empty() &&
        std::find(options_.job_uids.begin(), options_.job_uids.end(),
                  who.uid) == options_.job_uids.end()) {
      ++stats_.uid_not_for_jobs;
      return Standing::kAnonymous;
    }
    // Only a process the kernel's evidence ties to the job may fix its
    // identity; the others report anonymously (counted).
    if (who.known && evidence == Evidence::kUnverified) {
      // An environ the agent may not read is no evidence either way (an
      // agent without CAP_SYS_PTRACE, e.g. a non-root pod): the claim is
      // believed, as for a pid the agent cannot see, and counted.
      if (who.environ_read || !who.cgroup_job.empty()) {
        ++stats_.unproven;
        return Standing::kAnonymous;
      }
      ++stats_.unverified;
    }
    if (jobs_.size() >= kMaxLocalJobs) {
      ++stats_.tables_full;
      return absl::PermissionDeniedError(
          absl::StrCat("hello.job_id: ", kMaxLocalJobs,
                       " jobs have processes on this node; refused"));
    }
    return Standing::kMember;
  }
  const Job& j = it->second;
  if (who.uid == j.uid && who.cgroup_job == j.cgroup_job) {
    return Standing::kMember;
  }
  // The scheduler's word outranks a process's own: the job's holders came
  // first on weaker evidence than this process has. Only a scheduler's
  // cgroup takes a job over: an environment the agent could read is no
  // better than one it could not (an agent without CAP_SYS_PTRACE reads
  // only its own uid's).
  if (evidence > j.evidence && evidence >= Evidence::kScheduler) {
    *take_over = true;
    return Standing::kMember;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "hello.job_id ", Quoted(job), " belongs to uid ", j.uid,
      j.cgroup_job.empty() ? "" : absl::StrCat(" in Slurm ", j.cgroup_job),
      "; the process is uid ", who.uid,
      who.cgroup_job.empty() ? ""
                             : absl::StrCat(" in Slurm ", who.cgroup_job)));
}

void LocalTenants::Release(uint64_t holder) {
  auto h = holders_.find(holder);
  if (h == holders_.end()) return;
  Charge(h->second, -static_cast<int64_t>(h->second.global_ranks.size() +
                                          h->second.ranks.size()));
  for (int32_t g : h->second.global_ranks) {
    global_holders_.erase(std::pair(h->second.job, g));
  }
  for (const RankKey& key : h->second.ranks) {
    rank_holders_.erase(key);
    auto c = comm_jobs_.find(key.first);
    if (c != comm_jobs_.end() && --c->second.second == 0) comm_jobs_.erase(c);
  }
  h->second.global_ranks.clear();
  h->second.ranks.clear();
}

void LocalTenants::Quarantine(const std::string& job) {
  for (auto& [holder, h] : holders_) {
    if (h.job != job) continue;
    Release(holder);
    h.job.clear();  // a later hello of it for `job` is refused
    ++stats_.quarantined;
  }
  for (auto& [id, s] : streams_) {
    if (s.job != job) continue;
    s.job.clear();
    s.held.clear();
    s.quarantined = true;
  }
  jobs_.erase(job);
}

void LocalTenants::Charge(const Holder& h, int64_t delta) {
  if (!h.uid_known || delta == 0) return;
  auto it = uid_held_.try_emplace(h.uid, 0).first;
  it->second = static_cast<size_t>(static_cast<int64_t>(it->second) + delta);
  if (it->second == 0) uid_held_.erase(it);
}

LocalTenants::Share LocalTenants::FullShare(uint64_t holder,
                                            std::optional<uid_t> uid,
                                            bool from_another) {
  auto h = holders_.find(holder);
  const size_t mine = h == holders_.end() ? 0
                                          : h->second.global_ranks.size() +
                                                h->second.ranks.size();
  if (mine >= options_.max_ranks_per_process) {
    ++stats_.process_over_cap;
    return Share::kProcess;
  }
  // A uid whose word the kernel did not give (ingest.verify_pid off) has
  // no share of its own: the node's table still bounds it.
  if (uid.has_value()) {
    auto u = uid_held_.find(*uid);
    if (u != uid_held_.end() && u->second >= options_.max_ranks_per_uid) {
      ++stats_.uid_over_share;
      return Share::kUid;
    }
  }
  if (!from_another && held() >= options_.max_held_ranks) {
    ++stats_.tables_full;
    return Share::kNode;
  }
  return Share::kNone;
}

absl::Status LocalTenants::CheckGlobalRank(uint64_t holder,
                                           std::optional<uid_t> uid,
                                           const std::string& job,
                                           int32_t global_rank) {
  if (global_rank < 0) return absl::OkStatus();
  auto g = global_holders_.find(std::pair(job, global_rank));
  if (g != global_holders_.end()) {
    if (g->second == holder) return absl::OkStatus();
    ++stats_.ranks_refused;
    return absl::PermissionDeniedError(absl::StrCat(
        "hello.global_rank ", global_rank, " of job ", Quoted(job),
        " is held by process ", PidOf(g->second), " on this node"));
  }
  switch (FullShare(holder, uid)) {
    case Share::kNone:
      return absl::OkStatus();
    case Share::kProcess:
      return absl::PermissionDeniedError(absl::StrCat(
          "hello.global_rank: process ", PidOf(holder), " holds ",
          options_.max_ranks_per_process,
          " ranks on this node (ingest.max_ranks_per_process); refused"));
    case Share::kUid:
      return absl::PermissionDeniedError(absl::StrCat(
          "hello.global_rank: the processes of uid ", *uid, " hold ",
          options_.max_ranks_per_uid,
          " ranks on this node (ingest.max_ranks_per_uid); refused"));
    case Share::kNode:
      return absl::PermissionDeniedError(absl::StrCat(
          "hello.global_rank: ", options_.max_held_ranks,
          " ranks are held on this node (ingest.max_ranks_per_node); "
          "refused"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalTenants::Standing> LocalTenants::Hello(
    uint64_t stream, const ProcessIdentity& who, uint32_t hello_pid,
    const std::string& claimed_job, int32_t claimed_global_rank) {
  ProcessIdentity as = who;
  if (!as.known) as.pid = static_cast<pid_t>(hello_pid);
  const uint64_t holder =
      as.known ? HolderOf(static_cast<uint32_t>(as.pid), as.start_ticks)
               : hello_pid;
  MutexLock lock(&mu_);
  bool take_over = false;
  absl::StatusOr<Standing> standing = CheckJob(as, claimed_job, &take_over);
  if (!standing.ok()) {
    ++stats_.jobs_refused;
    return standing.status();
  }
  if (take_over) Quarantine(claimed_job);
  const bool anonymous = *standing == Standing::kAnonymous;
  const std::string job = anonymous ? "" : claimed_job;
  const int32_t global_rank = anonymous ? -1 : claimed_global_rank;
  auto hit = holders_.find(holder);
  if (hit != holders_.end() && hit->second.job != job) {
    ++stats_.jobs_refused;
    return absl::PermissionDeniedError(absl::StrCat(
        "hello.job_id ", Quoted(claimed_job), ": process ", PidOf(holder),
        " already reports for job ", Quoted(hit->second.job)));
  }
  const std::optional<uid_t> uid =
      as.known ? std::optional<uid_t>(as.uid) : std::nullopt;
  RETURN_IF_ERROR(CheckGlobalRank(holder, uid, job, global_rank));
  Holder& h = holders_[holder];
  if (h.streams++ == 0) {
    h.job = job;
    h.uid_known = as.known;
    h.uid = as.uid;
    if (!job.empty()) {
      // The first process of a job fixes its identity on this node.
      const Evidence evidence =
          as.known ? EvidenceFor(as, job) : Evidence::kUnverified;
      Job& j = jobs_.try_emplace(job, Job{as.uid, as.cgroup_job, 0, evidence})
                   .first->second;
      j.evidence = std::max(j.evidence, evidence);
      ++j.processes;
    }
  }
  if (global_rank >= 0 &&
      global_holders_.try_emplace(std::pair(job, global_rank), holder).second) {
    h.global_ranks.insert(global_rank);
    Charge(h, 1);
  }
  Stream& s = streams_[stream];
  s.holder = holder;
  s.job = job;
  return *standing;
}

absl::Status LocalTenants::CheckTrainer(const ProcessIdentity& who,
                                        const std::string& job,
                                        int32_t global_rank) {
  if (!who.known) return absl::OkStatus();
  MutexLock lock(&mu_);
  bool take_over = false;
  absl::StatusOr<Standing> standing = CheckJob(who, job, &take_over);
  absl::Status refused;
  if (!standing.ok()) {
    refused = absl::PermissionDeniedError(absl::StrCat(
        "trainer.", absl::StripPrefix(standing.status().message(), "hello.")));
  } else if (*standing == Standing::kAnonymous) {
    refused = absl::PermissionDeniedError(absl::StrCat(
        "trainer.job_id ", Quoted(job),
        ": nothing the kernel knows of the process (its environment, its "
        "Slurm cgroup) names the job"));
  } else if (auto g = global_holders_.find(std::pair(job, global_rank));
             g != global_holders_.end() &&
             g->second !=
                 HolderOf(static_cast<uint32_t>(who.pid), who.start_ticks)) {
    refused = absl::PermissionDeniedError(absl::StrCat(
        "trainer.global_rank ", global_rank, " of job ", Quoted(job),
        " is held by process ", PidOf(g->second), " on this node"));
  }
  if (!refused.ok()) ++stats_.trainers_refused;
  return refused;
}

bool LocalTenants::ClaimRank(Stream* s, const RankKey& key) {
  if (s->quarantined) {  // it lost its job: reports for nothing
    ++stats_.ranks_refused;
    return false;
  }
  if (s->held.contains(key)) return true;
  auto c = comm_jobs_.find(key.first);
  if (c != comm_jobs_.end() && c->second.first != s->job) {
    // A communicator only processes of no job claimed so far becomes the
    // job's whose process claims it first: a process of no job that read
    // the hash somewhere does not lock the job's own ranks out.
    if (!c->second.first.empty() || s->job.empty()) {
      ++stats_.comms_refused;
      return false;
    }
    c->second.first = s->job;
  }
  Holder& h = holders_[s->holder];
  const std::optional<uid_t> uid =
      h.uid_known ? std::optional<uid_t>(h.uid) : std::nullopt;
  auto r = rank_holders_.find(key);
  if (r != rank_holders_.end()) {
    if (r->second == s->holder) {
      s->held.insert(key);
      return true;
    }
    auto old = holders_.find(r->second);
    if (s->job.empty() || old == holders_.end() || !old->second.job.empty()) {
      ++stats_.ranks_refused;
      return false;
    }
    if (FullShare(s->holder, uid, /*from_another=*/true) != Share::kNone) {
      return false;
    }
    Supersede(r->second, key);
    r->second = s->holder;
  } else {
    if (FullShare(s->holder, uid) != Share::kNone) return false;
    rank_holders_[key] = s->holder;
    auto& [job, n] = comm_jobs_[key.first];
    job = s->job;
    ++n;
  }
  h.ranks.insert(key);
  Charge(h, 1);
  s->held.insert(key);
  return true;
}

void LocalTenants::Supersede(uint64_t holder, const RankKey& key) {
  Holder& old = holders_.find(holder)->second;  // the caller found it
  old.ranks.erase(key);
  Charge(old, -1);
  for (auto& [id, stream] : streams_) {
    if (stream.holder == holder) stream.held.erase(key);
  }
  ++stats_.jobless_superseded;
}

bool LocalTenants::CutList(const Holder& h, v1::CommunicatorInfo* info) {
  if (!h.uid_known || !ListsOtherRanks(*info)) return false;
  auto* g = info->mutable_global_ranks();
  bool cut = false;
  int keep = 0;
  for (int r = 0; r < g->size(); ++r) {
    if (g->Get(r) >= 0 && r != info->rank() &&
        !h.ranks.contains(RankKey(info->comm_hash(), r))) {
      g->Set(r, -1);
      cut = true;
    }
    if (g->Get(r) >= 0) keep = r + 1;
  }
  g->Truncate(keep);
  if (cut) ++stats_.listed_refused;
  return cut;
}

bool LocalTenants::NeedsFilter(uint64_t stream,
                               const v1::StreamTelemetryRequest& req) {
  // Lists are scanned before the lock (a list may be 2^20 entries long).
  bool lists = false;
  for (const v1::CommunicatorEvent& ev : req.communicators()) {
    lists = lists || ListsOtherRanks(ev.info());
  }
  MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return false;
  const Stream& s = it->second;
  if (lists) {
    auto h = holders_.find(s.holder);
    if (h != holders_.end() && h->second.uid_known) return true;
  }
  for (const v1::CommunicatorEvent& ev : req.communicators()) {
    if (!ev.info().job_id().empty() && ev.info().job_id() != s.job) {
      return true;
    }
    if (!s.held.contains(RankKey(ev.info().comm_hash(), ev.info().rank()))) {
      return true;
    }
  }
  for (const v1::OpRecord& op : req.ops()) {
    if (!s.held.contains(RankKey(op.comm_hash(), op.rank()))) return true;
  }
  return false;
}

bool LocalTenants::Filter(uint64_t stream, v1::StreamTelemetryRequest* req) {
  MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return false;
  Stream& s = it->second;
  // Plain loops, not remove_if with lambdas: clang's lock analysis does not
  // see that a lambda runs under mu_.
  auto* comms = req->mutable_communicators();
  std::vector<bool> drop(comms->size(), false);
  for (int i = 0; i < comms->size(); ++i) {
    const v1::CommunicatorInfo& info = comms->Get(i).info();
    if (!info.job_id().empty() && info.job_id() != s.job) {
      ++stats_.comms_refused;
      drop[i] = true;
    } else {
      drop[i] = !ClaimRank(&s, RankKey(info.comm_hash(), info.rank()));
    }
  }
  bool changed = EraseMarked(comms, drop) > 0;
  // After every claim of the message: a rank of the same communicator
  // claimed by a later record of it is the process's own.
  if (auto h = holders_.find(s.holder); h != holders_.end()) {
    for (v1::CommunicatorEvent& ev : *comms) {
      changed |= CutList(h->second, ev.mutable_info());
    }
  }
  auto* ops = req->mutable_ops();
  drop.assign(ops->size(), false);
  for (int i = 0; i < ops->size(); ++i) {
    const v1::OpRecord& op = ops->Get(i);
    drop[i] = !ClaimRank(&s, RankKey(op.comm_hash(), op.rank()));
  }
  changed |= EraseMarked(ops, drop) > 0;
  return changed;
}

void LocalTenants::Closed(uint64_t stream) {
  MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  const uint64_t holder = it->second.holder;
  streams_.erase(it);
  auto h = holders_.find(holder);
  if (h == holders_.end() || --h->second.streams > 0) return;
  // The process's last stream: its ranks are free for whoever comes next
  // (the same rank restarted).
  Release(holder);
  // The job's last process: its identity is released (a crashed squatter
  // holds nothing; the job's next process proves itself again).
  auto j = jobs_.find(h->second.job);
  if (j != jobs_.end() && --j->second.processes == 0) jobs_.erase(j);
  holders_.erase(h);
}

bool LocalTenants::ReportsForAJob(uint64_t stream) const {
  MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  return it != streams_.end() && !it->second.job.empty();
}

bool LocalTenants::Quarantined(uint64_t stream) const {
  MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  return it != streams_.end() && it->second.quarantined;
}

LocalTenants::Stats LocalTenants::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace pitstop::agent
