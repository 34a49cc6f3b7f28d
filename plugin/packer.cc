#include "plugin/packer.h"

#include <cstring>

#include "plugin/wire.h"

namespace pitstop::plugin {
namespace {

struct Entry {
  const char* name;
  int value;  // common.proto enum value
};

template <size_t N>
int Lookup(const char* s, const Entry (&table)[N], int unspecified, int other) {
  if (s == nullptr) return unspecified;
  for (const auto& e : table) {
    if (std::strcmp(s, e.name) == 0) return e.value;
  }
  return other;
}

constexpr Entry kFuncs[] = {
    {"AllReduce", 1}, {"AllGather", 2}, {"ReduceScatter", 3}, {"Broadcast", 4},
    {"Reduce", 5},    {"AlltoAll", 6},  {"Gather", 7},        {"Scatter", 8},
    {"Send", 9},      {"Recv", 10},     {"SendRecv", 11},
};

struct TypeEntry {
  const char* name;
  int value;
  uint32_t size;
};
constexpr TypeEntry kTypes[] = {
    {"ncclInt8", 1, 1},        {"ncclUint8", 2, 1},
    {"ncclInt32", 3, 4},       {"ncclUint32", 4, 4},
    {"ncclInt64", 5, 8},       {"ncclUint64", 6, 8},
    {"ncclFloat16", 7, 2},     {"ncclFloat32", 8, 4},
    {"ncclFloat64", 9, 8},     {"ncclBfloat16", 10, 2},
    {"ncclFloat8e4m3", 11, 1}, {"ncclFloat8e5m2", 12, 1},
};

constexpr Entry kAlgos[] = {
    {"TREE", 1},          {"RING", 2}, {"COLLNET_DIRECT", 3},
    {"COLLNET_CHAIN", 4}, {"NVLS", 5}, {"NVLS_TREE", 6},
    {"PAT", 7},
};

constexpr Entry kProtos[] = {
    {"LL", 1},
    {"LL128", 2},
    {"SIMPLE", 3},
};

const TypeEntry* FindType(const char* s) {
  if (s == nullptr) return nullptr;
  for (const auto& e : kTypes) {
    if (std::strcmp(s, e.name) == 0) return &e;
  }
  return nullptr;
}

}  // namespace

int MapFunc(const char* func) { return Lookup(func, kFuncs, 0, 13); }

int MapDataType(const char* datatype) {
  if (datatype == nullptr) return 0;
  const TypeEntry* e = FindType(datatype);
  return e != nullptr ? e->value : 13;
}

uint32_t DataTypeSize(const char* datatype) {
  const TypeEntry* e = FindType(datatype);
  return e != nullptr ? e->size : 0;
}

int MapAlgorithm(const char* algo) { return Lookup(algo, kAlgos, 0, 8); }

int MapProtocol(const char* proto) { return Lookup(proto, kProtos, 0, 4); }

void PackRecord(const Record& record, std::string* batch,
                std::string* scratch) {
  scratch->clear();
  ProtoWriter w(scratch);
  int field = 0;
  switch (record.type) {
    case RecordType::kOp: {
      const OpRec& r = record.op;
      field = kReqOps;
      w.Varint(1, r.op_id);
      w.Varint(2, r.comm_hash);
      w.Int32(3, r.rank);
      w.Varint(4, r.is_p2p ? 2 : 1);  // OpKind
      w.Varint(5, MapFunc(r.func));
      w.Varint(6, r.seq_number);
      w.Varint(7, r.count);
      w.Varint(8, r.count * DataTypeSize(r.datatype));
      w.Varint(9, MapDataType(r.datatype));
      w.Int32(10, r.root);
      w.Int32(11, r.peer);
      w.Varint(12, MapAlgorithm(r.algo));
      w.Varint(13, MapProtocol(r.proto));
      w.Varint(14, r.n_channels);
      w.Varint(15, r.n_warps);
      w.Varint(16, r.api_cpu_ns);
      w.Varint(17, r.enqueue_start_cpu_ns);
      w.Varint(18, r.enqueue_stop_cpu_ns);
      w.Bool(19, r.graph_captured);
      w.Bool(20, r.graph_replay);
      break;
    }
    case RecordType::kCompletion:
      field = kReqCompletions;
      w.Varint(1, record.completion.op_id);
      w.Varint(2, record.completion.completion_cpu_ns);
      w.Varint(3, record.completion.children);
      break;
    case RecordType::kKernelCh: {
      const KernelChRec& r = record.kernel;
      field = kReqKernelChannels;
      w.Varint(1, r.op_id);
      w.Varint(2, r.channel_id);
      w.Varint(3, r.start_gpu_ns);
      w.Varint(4, r.stop_gpu_ns);
      w.Varint(5, r.start_cpu_ns);
      w.Varint(6, r.stop_cpu_ns);
      break;
    }
    case RecordType::kProxyOp: {
      const ProxyOpRec& r = record.proxy_op;
      field = kReqProxyOps;
      w.Varint(1, r.op_id);
      w.Varint(2, r.proxy_index);
      w.Varint(3, r.pid);
      w.Varint(4, r.channel_id);
      w.Int32(5, r.peer);
      w.Bool(6, r.is_send != 0);
      w.Varint(7, r.n_steps);
      w.Varint(8, r.chunk_size_bytes);
      w.Varint(9, r.start_cpu_ns);
      w.Varint(10, r.in_progress_cpu_ns);
      w.Varint(11, r.stop_cpu_ns);
      w.Varint(12, r.bytes);
      w.Varint(13, r.steps_seen);
      w.Varint(14, r.send_wait_ns);
      w.Varint(15, r.recv_wait_ns);
      w.Varint(16, r.peer_wait_ns);
      w.Varint(17, r.gpu_wait_ns);
      break;
    }
    case RecordType::kProxyStep: {
      const ProxyStepRec& r = record.proxy_step;
      field = kReqProxySteps;
      w.Varint(1, r.op_id);
      w.Varint(2, r.proxy_index);
      w.Varint(3, r.step);
      w.Varint(4, r.bytes);
      w.Varint(5, r.start_cpu_ns);
      w.Varint(6, r.stop_cpu_ns);
      w.Varint(7, r.state_cpu_ns[kStepSendGpuWait]);
      w.Varint(8, r.state_cpu_ns[kStepSendPeerWait]);
      w.Varint(9, r.state_cpu_ns[kStepSendWait]);
      w.Varint(10, r.state_cpu_ns[kStepRecvWait]);
      w.Varint(11, r.state_cpu_ns[kStepRecvFlushWait]);
      w.Varint(12, r.state_cpu_ns[kStepRecvGpuWait]);
      break;
    }
    case RecordType::kNetPlugin: {
      const NetPluginRec& r = record.net;
      field = kReqNetEvents;
      w.Varint(1, r.op_id);
      w.Varint(2, r.proxy_index);
      w.Varint(3, r.transport);
      w.Int32(4, r.device);
      w.Varint(5, r.qp_num);
      w.Int32(6, r.socket_fd);
      w.Varint(7, r.length_bytes);
      w.Varint(8, r.start_cpu_ns);
      w.Varint(9, r.stop_cpu_ns);
      break;
    }
    case RecordType::kNone:
      return;
  }
  ProtoWriter(batch).Message(field, *scratch);
}

}  // namespace pitstop::plugin
