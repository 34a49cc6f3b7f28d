#include "plugin/wire.h"

#include <utility>

namespace pitstop::plugin {

void ProtoWriter::PackedInt32(int field, const std::vector<int32_t>& v) {
  if (v.empty()) return;
  std::string body;
  for (int32_t x : v) {
    uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(x));
    while (u >= 0x80) {
      body.push_back(static_cast<char>((u & 0x7f) | 0x80));
      u >>= 7;
    }
    body.push_back(static_cast<char>(u));
  }
  Message(field, body);
}

std::string EncodeCommInfo(const CommInfo& i) {
  std::string s;
  ProtoWriter w(&s);
  w.Varint(1, i.comm_hash);
  w.Bytes(2, i.comm_name);
  w.Int32(3, i.n_ranks);
  w.Int32(4, i.n_nodes);
  w.Int32(5, i.rank);
  w.PackedInt32(6, i.global_ranks);
  w.Varint(7, i.parent_comm_hash);
  w.Bytes(8, i.host);
  w.Varint(9, i.pid);
  w.Int32(10, i.cuda_device);
  w.Bytes(11, i.job_id);
  w.Varint(12, i.profiler_abi_version);
  w.Varint(13, static_cast<uint64_t>(i.source));
  return s;
}

std::string EncodeCommEvent(const CommEvent& ev) {
  std::string s;
  ProtoWriter w(&s);
  w.Varint(1, static_cast<uint64_t>(ev.kind));
  w.Message(2, EncodeCommInfo(ev.info));
  w.Varint(3, ev.time_cpu_ns);
  return s;
}

std::string EncodeHello(const Hello& h) {
  std::string s;
  ProtoWriter w(&s);
  w.Bytes(1, h.host);
  w.Varint(2, h.pid);
  w.Bytes(3, h.job_id);
  w.Bytes(4, h.library_version);
  w.Varint(5, h.nccl_version);
  w.Varint(6, h.start_unix_ns);
  w.Varint(7, h.start_cpu_ns);
  w.Bytes(8, h.load_mode);
  w.Int32(9, h.global_rank);
  w.Varint(10, h.reconnects);
  return s;
}

std::string EncodeDrops(const Drops& d) {
  std::string s;
  ProtoWriter w(&s);
  w.Varint(1, d.ring_full);
  w.Varint(2, d.pool_exhausted);
  w.Varint(3, d.export_dropped);
  w.Varint(4, d.ignored);
  w.Varint(5, d.events_recorded);
  return s;
}

std::string EncodeGoodbye(GoodbyeReason reason, uint64_t time_cpu_ns) {
  std::string s;
  ProtoWriter w(&s);
  w.Varint(1, static_cast<uint64_t>(reason));
  w.Varint(2, time_cpu_ns);
  return s;
}

std::string EncodeInitFailure(const InitFailure& f) {
  std::string s;
  ProtoWriter w(&s);
  w.Bytes(1, f.call);
  w.Int32(2, f.result);
  w.Bytes(3, f.error);
  w.Int32(4, f.n_ranks);
  w.Int32(5, f.rank);
  w.Varint(6, f.parent_comm_hash);
  w.Varint(7, f.time_cpu_ns);
  return s;
}

namespace {

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  bool done() const { return p_ >= end_; }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
      const auto b = static_cast<uint8_t>(*p_++);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Reads a field header and, for length-delimited fields, the payload.
  bool Field(int* field, int* type, uint64_t* value, const char** data,
             size_t* len) {
    uint64_t tag = 0;
    if (!Varint(&tag)) return false;
    *field = static_cast<int>(tag >> 3);
    *type = static_cast<int>(tag & 7);
    switch (*type) {
      case 0:
        return Varint(value);
      case 1:
        return Skip(8);
      case 5:
        return Skip(4);
      case 2: {
        uint64_t n = 0;
        if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
        *data = p_;
        *len = static_cast<size_t>(n);
        p_ += n;
        return true;
      }
      default:
        return false;
    }
  }

 private:
  bool Skip(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    p_ += n;
    return true;
  }
  const char* p_;
  const char* end_;
};

// One ActivationCommand body. False when malformed.
bool DecodeActivation(const char* data, size_t len, Activation* a) {
  Reader m(data, len);
  while (!m.done()) {
    int f = 0, t = 0;
    uint64_t v = 0;
    const char* d = nullptr;
    size_t l = 0;
    if (!m.Field(&f, &t, &v, &d, &l)) return false;
    if (t != 0) continue;
    switch (f) {
      case 1:
        a->comm_hash = v;
        break;
      case 2:
        a->event_mask = static_cast<uint32_t>(v);
        break;
      case 3:
        a->duration_ms = static_cast<uint32_t>(v);
        break;
      case 4:
        a->command_id = v;
        break;
      default:
        break;
    }
  }
  return true;
}

bool DecodeDirectiveComm(const char* data, size_t len,
                         MigrationDirective::Comm* c) {
  Reader m(data, len);
  while (!m.done()) {
    int f = 0, t = 0;
    uint64_t v = 0;
    const char* d = nullptr;
    size_t l = 0;
    if (!m.Field(&f, &t, &v, &d, &l)) return false;
    if (f == kDirCommOldHash && t == 0) c->old_comm_hash = v;
    if (f == kDirCommNewId && t == 2) c->new_comm_id.assign(d, l);
  }
  return true;  // the id's length depends on the phase: DecodeDirective
}

// One field of a RankMigrationDirective. False when unusable.
bool ApplyDirectiveField(int f, int t, uint64_t v, const char* d, size_t l,
                         MigrationDirective* out) {
  if (t == 2) {
    switch (f) {
      case kDirMigrationId:
        out->migration_id.assign(d, l);
        return true;
      case kDirComms:
        out->comms.emplace_back();
        return DecodeDirectiveComm(d, l, &out->comms.back());
      case kDirTransferCommId:
        out->transfer_comm_id.assign(d, l);
        return l == kCommIdBytes;
      case kDirReason:
        out->reason.assign(d, l);
        return true;
      default:
        return true;  // unknown: skipped
    }
  }
  if (t != 0) return true;
  switch (f) {
    case kDirPhase:
      out->phase = static_cast<MigrationPhase>(v);
      return v >= kPhasePrepare && v <= kPhaseMakeIds;
    case kDirEpoch:
      out->epoch = v;
      return true;
    case kDirRole:
      out->role = static_cast<MigrationRole>(v);
      return v >= kRoleStayer && v <= kRoleJoiner;
    case kDirGlobalRank:
      out->global_rank = static_cast<int32_t>(v);
      return true;
    case kDirSwitchCommHash:
      out->switch_comm_hash = v;
      return true;
    case kDirSwitchSeq:
      out->switch_seq = v;
      return true;
    case kDirMakeCommIds:
      out->make_comm_ids = v != 0;
      return true;
    case kDirFromReplica:
      out->from_replica = v != 0;
      return true;
    default:
      return true;
  }
}

// Every comm brings its new id, except to MAKE_IDS, which makes them (and
// ignores what came: the phase may follow the comms on the wire).
bool CommIdsFit(const MigrationDirective& d) {
  if (d.phase == kPhaseMakeIds) return true;
  for (const MigrationDirective::Comm& c : d.comms) {
    if (c.new_comm_id.size() != kCommIdBytes) return false;
  }
  return true;
}

bool DecodeDirective(const char* data, size_t len, MigrationDirective* out) {
  Reader m(data, len);
  bool has_phase = false, has_role = false;
  while (!m.done()) {
    int f = 0, t = 0;
    uint64_t v = 0;
    const char* d = nullptr;
    size_t l = 0;
    if (!m.Field(&f, &t, &v, &d, &l)) return false;
    if (!ApplyDirectiveField(f, t, v, d, l, out)) return false;
    has_phase |= f == kDirPhase && t == 0;
    has_role |= f == kDirRole && t == 0;
  }
  // Phase and role are never zero in a usable directive (proto3 omits
  // zero values, so an absent one is UNSPECIFIED).
  return has_phase && has_role && !out->migration_id.empty() &&
         CommIdsFit(*out);
}

}  // namespace

std::string EncodeMigrationAck(const MigrationAck& a) {
  std::string s;
  ProtoWriter w(&s);
  w.Bytes(kAckMigrationId, a.migration_id);
  w.Varint(kAckEpoch, a.epoch);
  w.Varint(kAckPhase, static_cast<uint64_t>(a.phase));
  w.Bool(kAckOk, a.ok);
  w.Bytes(kAckError, a.error);
  w.Int32(kAckGlobalRank, a.global_rank);
  w.Varint(kAckProgressSeq, a.progress_seq);
  for (const MigrationDirective::Comm& c : a.made_comms) {
    std::string comm;
    ProtoWriter cw(&comm);
    cw.Varint(kDirCommOldHash, c.old_comm_hash);
    cw.Bytes(kDirCommNewId, c.new_comm_id);
    w.Message(kAckMadeComms, comm);
  }
  w.Bytes(kAckMadeTransferId, a.made_transfer_id);
  return s;
}

bool DecodeResponse(const std::string& bytes, AgentMessages* out) {
  Reader r(bytes.data(), bytes.size());
  while (!r.done()) {
    int field = 0, type = 0;
    uint64_t value = 0;
    const char* data = nullptr;
    size_t len = 0;
    if (!r.Field(&field, &type, &value, &data, &len)) return false;
    if (type != 2) continue;  // unknown fields are skipped
    if (field == kRespActivation) {
      Activation a;
      if (!DecodeActivation(data, len, &a)) return false;
      out->activations.push_back(a);
    } else if (field == kRespMigrationDirective) {
      MigrationDirective d;
      if (DecodeDirective(data, len, &d)) {
        out->directives.push_back(std::move(d));
      } else {
        ++out->malformed_directives;
      }
    }
  }
  return true;
}

}  // namespace pitstop::plugin
