// Protobuf wire encoding of the telemetry.proto messages the library sends,
// written by hand so the library needs no libprotobuf (see docs/plugin.md:
// Debian's static libprotobuf.a is not PIC, and a second registration of
// pitstop/v1/*.proto in a process's shared libprotobuf would abort it).
// Field numbers are those of proto/pitstop/v1/{common,telemetry}.proto;
// tests decode the bytes with the generated classes to keep them honest.
//
// Not thread-safe; used by the exporter thread (and `pitstop replay`).
#ifndef PITSTOP_PLUGIN_WIRE_H_
#define PITSTOP_PLUGIN_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pitstop::plugin {

// Appends fields to a byte string. Zero values are skipped (proto3).
class ProtoWriter {
 public:
  explicit ProtoWriter(std::string* out) : out_(out) {}
  void Varint(int field, uint64_t v) {
    if (v == 0) return;
    Tag(field, 0);
    Raw(v);
  }
  // int32 fields: negative values are 10-byte varints, as protobuf does.
  void Int32(int field, int32_t v) {
    Varint(field, static_cast<uint64_t>(static_cast<int64_t>(v)));
  }
  void Bool(int field, bool v) { Varint(field, v ? 1 : 0); }
  void Bytes(int field, const std::string& s) {
    if (s.empty()) return;
    Tag(field, 2);
    Raw(s.size());
    out_->append(s);
  }
  // A length-delimited field holding `body` (a nested message), even if
  // empty when `always` (presence matters for message fields).
  void Message(int field, const std::string& body, bool always = true) {
    if (body.empty() && !always) return;
    Tag(field, 2);
    Raw(body.size());
    out_->append(body);
  }
  // Packed repeated int32.
  void PackedInt32(int field, const std::vector<int32_t>& v);

 private:
  void Tag(int field, int wire_type) {
    Raw((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
  }
  void Raw(uint64_t v) {
    while (v >= 0x80) {
      out_->push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_->push_back(static_cast<char>(v));
  }
  std::string* out_;
};

// CommunicatorInfo (common.proto).
struct CommInfo {
  enum Source { kUnspecified = 0, kProfilerInit = 1, kInterposer = 2 };
  uint64_t comm_hash = 0;
  std::string comm_name;
  int32_t n_ranks = 0;
  int32_t n_nodes = 0;
  int32_t rank = 0;
  std::vector<int32_t> global_ranks;
  uint64_t parent_comm_hash = 0;
  std::string host;
  uint32_t pid = 0;
  int32_t cuda_device = -1;
  std::string job_id;
  uint32_t profiler_abi_version = 0;
  Source source = kUnspecified;
};

// CommunicatorEvent.Kind values.
enum CommEventKind {
  kCommInit = 1,
  kCommUpdate = 2,
  kCommFinalize = 3,
  kCommAbort = 4
};

struct CommEvent {
  CommEventKind kind = kCommInit;
  CommInfo info;
  uint64_t time_cpu_ns = 0;
};

struct Hello {
  std::string host;
  uint32_t pid = 0;
  std::string job_id;
  std::string library_version;
  uint32_t nccl_version = 0;
  uint64_t start_unix_ns = 0;
  uint64_t start_cpu_ns = 0;
  std::string load_mode;
  int32_t global_rank = -1;
  uint32_t reconnects = 0;
};

struct Drops {
  uint64_t ring_full = 0;
  uint64_t pool_exhausted = 0;
  uint64_t export_dropped = 0;
  uint64_t ignored = 0;
  uint64_t events_recorded = 0;
};

// CommInitFailure (common.proto): a communicator creation call that
// returned an error (interposer).
struct InitFailure {
  std::string call;
  int32_t result = 0;
  std::string error;
  int32_t n_ranks = -1;
  int32_t rank = -1;
  uint64_t parent_comm_hash = 0;
  uint64_t time_cpu_ns = 0;
};

// ProcessGoodbye.Reason values.
enum GoodbyeReason { kGoodbyeFinalize = 1, kGoodbyeExit = 2 };

// ActivationCommand (agent -> library).
struct Activation {
  uint64_t comm_hash = 0;
  uint32_t event_mask = 0;
  uint32_t duration_ms = 0;
  uint64_t command_id = 0;
};

// StreamTelemetryRequest field numbers.
enum RequestField {
  kReqHello = 1,
  kReqBatchSeq = 2,
  kReqCommunicators = 3,
  kReqOps = 4,
  kReqCompletions = 5,
  kReqKernelChannels = 6,
  kReqProxyOps = 7,
  kReqProxySteps = 8,
  kReqNetEvents = 9,
  kReqDrops = 10,
  kReqSentCpuNs = 11,
  kReqGoodbye = 12,
  kReqInitFailures = 13,
  kReqMigrationAcks = 14,
};

// StreamTelemetryResponse field numbers.
enum ResponseField {
  kRespActivation = 1,
  kRespMigrationDirective = 2,
};

// RankMigrationDirective field numbers, and its Comm's.
enum DirectiveField {
  kDirPhase = 1,
  kDirMigrationId = 2,
  kDirEpoch = 3,
  kDirRole = 4,
  kDirGlobalRank = 5,
  kDirComms = 6,
  kDirSwitchCommHash = 7,
  kDirSwitchSeq = 8,
  kDirTransferCommId = 9,
  kDirReason = 10,
  kDirMakeCommIds = 11,
  kDirFromReplica = 12,
};
enum DirectiveCommField {
  kDirCommOldHash = 1,
  kDirCommNewId = 2,
};

// RankMigrationAck field numbers.
enum AckField {
  kAckMigrationId = 1,
  kAckEpoch = 2,
  kAckPhase = 3,
  kAckOk = 4,
  kAckError = 5,
  kAckGlobalRank = 6,
  kAckProgressSeq = 7,
  kAckMadeComms = 8,  // RankMigrationDirective.Comm, DirectiveCommField
  kAckMadeTransferId = 9,
};

// RankMigrationDirective.Phase / .Role values.
enum MigrationPhase {
  kPhaseUnspecified = 0,
  kPhasePrepare = 1,
  kPhaseSwitchAt = 2,
  kPhaseCommit = 3,
  kPhaseAbort = 4,
  kPhaseMakeIds = 5,
};
enum MigrationRole {
  kRoleUnspecified = 0,
  kRoleStayer = 1,
  kRoleLeaver = 2,
  kRoleJoiner = 3,
};

// Bytes of an ncclUniqueId: new_comm_id and transfer_comm_id must be this.
inline constexpr size_t kCommIdBytes = 128;

// RankMigrationDirective (agent -> library). Each comm's new_comm_id has
// kCommIdBytes, except in PHASE_MAKE_IDS, where the library makes the ids
// and does not read it.
struct MigrationDirective {
  struct Comm {
    uint64_t old_comm_hash = 0;
    std::string new_comm_id;
  };
  MigrationPhase phase = kPhaseUnspecified;
  std::string migration_id;
  uint64_t epoch = 0;
  MigrationRole role = kRoleUnspecified;
  // proto3: an absent field is 0, and rank 0's directive omits it (a -1
  // default here answered rank 0's directives as rank -1).
  int32_t global_rank = 0;
  std::vector<Comm> comms;
  uint64_t switch_comm_hash = 0;
  uint64_t switch_seq = 0;
  std::string transfer_comm_id;
  std::string reason;
  bool make_comm_ids = false;  // PHASE_MAKE_IDS: make the comms' ids too
  // Node failure: the leaver is dead; READY carries the failed step,
  // switch_seq is the step to redo, a stayer with a transfer id sends.
  bool from_replica = false;
};

// RankMigrationAck (library -> agent).
struct MigrationAck {
  std::string migration_id;
  uint64_t epoch = 0;
  MigrationPhase phase = kPhaseUnspecified;
  bool ok = false;
  std::string error;
  int32_t global_rank = -1;
  uint64_t progress_seq = 0;
  // PHASE_MAKE_IDS: each comm's old hash and its new id, and the transfer
  // communicator's id (kCommIdBytes each).
  std::vector<MigrationDirective::Comm> made_comms;
  std::string made_transfer_id;
};

// What one StreamTelemetryResponse carried.
struct AgentMessages {
  std::vector<Activation> activations;
  std::vector<MigrationDirective> directives;
  // Directives that could not be used (undecodable body, unknown phase or
  // role, an id that is not kCommIdBytes long): skipped and counted.
  uint64_t malformed_directives = 0;
};

std::string EncodeCommInfo(const CommInfo& info);
std::string EncodeCommEvent(const CommEvent& ev);
std::string EncodeHello(const Hello& hello);
std::string EncodeDrops(const Drops& drops);
std::string EncodeGoodbye(GoodbyeReason reason, uint64_t time_cpu_ns);
std::string EncodeInitFailure(const InitFailure& f);
std::string EncodeMigrationAck(const MigrationAck& ack);

// Parses a StreamTelemetryResponse. False when its framing is malformed
// (what was parsed before the error is kept); a directive whose own body is
// unusable is skipped and counted in out->malformed_directives instead.
bool DecodeResponse(const std::string& bytes, AgentMessages* out);

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_WIRE_H_
