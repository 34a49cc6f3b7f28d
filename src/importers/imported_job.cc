#include "src/importers/imported_job.h"

#include <algorithm>
#include <map>
#include <set>

namespace pitstop::importers {

SeqKey SeqKeyOf(const v1::OpRecord& record) {
  return {record.comm_hash(), static_cast<int32_t>(record.func())};
}

bool ForDetection(const ImportedOp& op, const SeqCuts* cuts) {
  if (!op.for_detection) return false;
  if (cuts == nullptr || op.record.kind() != v1::OP_KIND_COLLECTIVE) {
    return true;
  }
  auto it = cuts->find(SeqKeyOf(op.record));
  return it == cuts->end() || op.record.seq_number() <= it->second;
}

void ApplySeqCuts(const SeqCuts& cuts, ImportedJob* job) {
  for (ImportedRank& rank : job->ranks) {
    for (ImportedOp& op : rank.ops) op.for_detection = ForDetection(op, &cuts);
  }
}

std::vector<v1::StreamTelemetryRequest> ToTelemetry(const ImportedJob& job,
                                                    const ImportedRank& rank,
                                                    size_t max_records,
                                                    const SeqCuts* cuts) {
  std::vector<v1::StreamTelemetryRequest> out;
  max_records = std::max<size_t>(max_records, 1);
  v1::StreamTelemetryRequest first;
  v1::ProcessHello* hello = first.mutable_hello();
  hello->set_host(rank.host);
  hello->set_pid(rank.pid);
  hello->set_job_id(job.job_id);
  hello->set_library_version("imported");
  hello->set_load_mode("imported");
  hello->set_global_rank(rank.global_rank);
  for (const v1::CommunicatorInfo& info : rank.comms) {
    v1::CommunicatorEvent* ev = first.add_communicators();
    ev->set_kind(v1::CommunicatorEvent::KIND_INIT);
    *ev->mutable_info() = info;
  }
  for (const v1::CommInitFailure& f : rank.init_failures) {
    *first.add_init_failures() = f;
  }
  out.push_back(std::move(first));
  size_t in_batch = 0;
  for (const ImportedOp& op : rank.ops) {
    if (!ForDetection(op, cuts)) continue;
    if (in_batch == max_records) {
      out.emplace_back();
      in_batch = 0;
    }
    v1::StreamTelemetryRequest& batch = out.back();
    *batch.add_ops() = op.record;
    ++in_batch;
    bool has_times = op.start_ns != 0 && op.end_ns >= op.start_ns;
    if (has_times) {
      v1::KernelChannelRecord* k = batch.add_kernel_channels();
      k->set_op_id(op.record.op_id());
      k->set_channel_id(0);
      k->set_start_gpu_ns(op.start_ns);
      k->set_stop_gpu_ns(op.state == v1::OP_STATE_COMPLETED ? op.end_ns : 0);
      k->set_start_cpu_ns(op.start_ns);
      k->set_stop_cpu_ns(op.state == v1::OP_STATE_COMPLETED ? op.end_ns : 0);
    } else if (op.state == v1::OP_STATE_STARTED) {
      v1::KernelChannelRecord* k = batch.add_kernel_channels();
      k->set_op_id(op.record.op_id());
      uint64_t t =
          op.start_ns != 0 ? op.start_ns : op.record.enqueue_start_cpu_ns();
      k->set_start_cpu_ns(t);
    }
    if (op.state == v1::OP_STATE_COMPLETED) {
      v1::OpCompletion* c = batch.add_completions();
      c->set_op_id(op.record.op_id());
      uint64_t t =
          op.end_ns != 0 ? op.end_ns : op.record.enqueue_start_cpu_ns();
      c->set_completion_cpu_ns(t);
      c->set_children(has_times ? 1 : 0);
    }
  }
  if (rank.absent) {
    out.back().mutable_goodbye()->set_reason(v1::ProcessGoodbye::REASON_EXIT);
  }
  for (size_t k = 0; k < out.size(); ++k) out[k].set_batch_seq(k + 1);
  return out;
}

void AddAbsentRanks(ImportedJob* job,
                    const std::function<std::string(int32_t)>& host_of) {
  std::set<int32_t> present;
  std::map<uint64_t, const v1::CommunicatorInfo*> comms;
  for (const ImportedRank& r : job->ranks) {
    present.insert(r.global_rank);
    for (const v1::CommunicatorInfo& c : r.comms)
      comms.emplace(c.comm_hash(), &c);
  }
  std::map<int32_t, ImportedRank> absent;
  for (const auto& [hash, info] : comms) {
    for (int32_t i = 0; i < info->global_ranks_size(); ++i) {
      int32_t g = info->global_ranks(i);
      if (g < 0 || present.count(g)) continue;
      ImportedRank& r = absent[g];
      r.global_rank = g;
      r.absent = true;
      r.host = host_of(g);
      r.file = "(no file)";
      // Without the member list: the present members carry it, and a copy
      // per absent rank would cost (members x absent ranks).
      v1::CommunicatorInfo copy;
      copy.set_comm_hash(info->comm_hash());
      copy.set_comm_name(info->comm_name());
      copy.set_n_ranks(info->n_ranks());
      copy.set_n_nodes(info->n_nodes());
      copy.set_job_id(info->job_id());
      copy.set_source(info->source());
      copy.set_rank(i);
      copy.set_host(r.host);
      copy.set_pid(0);
      r.comms.push_back(std::move(copy));
    }
  }
  for (auto& [g, r] : absent) job->ranks.push_back(std::move(r));
  std::sort(job->ranks.begin(), job->ranks.end(),
            [](const ImportedRank& a, const ImportedRank& b) {
              return a.global_rank < b.global_rank;
            });
  for (ImportedRank& r : job->ranks) {
    if (r.pid == 0)
      r.pid = 1000000 + static_cast<uint32_t>(std::max(0, r.global_rank));
    for (v1::CommunicatorInfo& c : r.comms) {
      c.set_pid(r.pid);
      c.set_cuda_device(-1);  // no importer's source names the device
    }
  }
}

}  // namespace pitstop::importers
