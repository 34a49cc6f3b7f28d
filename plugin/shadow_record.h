// Shadow iterations (docs/migration.md "Shadow iterations"): the record of
// one collective's output, as a designated rank writes it
// (PITSTOP_SHADOW_RECORD) and a sandboxed joiner reads it back
// (PITSTOP_SHADOW_DIR) to answer the same collective without the job.
//
// A record is content-addressed: its file name is the hex of a hash of its
// key, so writer and reader need no index, only the key, which every rank
// and the joiner's sandbox handle compute alike (the communicator's stable
// identity, NCCL's commHash, not a pointer).
//
// File: "PSSHAD01", u32 version (1), u32 func, u64 comm_hash, u64 seq,
// i32 dtype, i32 op, i32 root, i32 rank, u64 count, u64 bytes, u64 FNV-1a
// of the output bytes, then the bytes. Little-endian. The reader checks
// every field against the key it wants (a hash collision reads as a
// mismatch), the size, and the checksum, before it copies anything.
//
// Threads: pure functions; files are written to DIR/NAME.tmp.PID and
// renamed, so a reader sees a whole record or none.
#ifndef PITSTOP_PLUGIN_SHADOW_RECORD_H_
#define PITSTOP_PLUGIN_SHADOW_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace pitstop::plugin {

// The collectives a record can answer.
enum class ShadowFunc : uint32_t {
  kAllReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kBroadcast = 4,
  kReduce = 5,
  kAlltoAll = 6,
  kGather = 7,
  kScatter = 8,
};

struct ShadowKey {
  uint64_t comm_hash = 0;  // NCCL's commHash: the same on every member
  uint64_t seq = 0;        // operations enqueued on the handle before it
  ShadowFunc func = ShadowFunc::kAllReduce;
  int32_t dtype = 0;   // ncclDataType_t
  int32_t op = -1;     // ncclRedOp_t; -1 when the function has none
  int32_t root = -1;   // -1 when the function has none
  int32_t rank = -1;   // the member whose output it is; -1: every member
                       // gets the same (all-reduce, all-gather, broadcast)
  uint64_t count = 0;  // the call's count argument
};

// One collective call as the interposer sees it: enough to name its output.
struct ShadowCall {
  ShadowFunc func = ShadowFunc::kAllReduce;
  int32_t dtype = 0;
  int32_t op = -1;
  int32_t root = -1;
  uint64_t count = 0;    // the call's count argument
  void* recv = nullptr;  // where the output goes
};

// The key (less comm_hash and seq) and output size of `call` at member
// `rank` of `n_ranks`; false when this member gets no output (reduce and
// gather off the root) or the datatype is unknown. All-reduce, all-gather
// and broadcast give every member the same output (rank -1 in the key:
// any member's record answers any member); the others are per member.
bool ShadowOutput(const ShadowCall& call, int rank, int n_ranks, ShadowKey* key,
                  uint64_t* bytes) noexcept;

inline constexpr char kShadowMagic[8] = {'P', 'S', 'S', 'H',
                                         'A', 'D', '0', '1'};
inline constexpr uint32_t kShadowVersion = 1;
inline constexpr size_t kShadowHeaderBytes =
    8 + 4 + 4 + 8 + 8 + 4 * 4 + 8 + 8 + 8;

// FNV-1a 64 over the key's fields in file order (little-endian).
uint64_t ShadowKeyHash(const ShadowKey& key) noexcept;
// The record's file name: 16 lower-case hex digits of the hash + ".rec".
std::string ShadowFileName(const ShadowKey& key);
// Bytes of one element of an ncclDataType_t; 0 for an unknown type.
size_t ShadowDtypeBytes(int32_t dtype) noexcept;

// Header + `bytes` of output.
std::string EncodeShadowRecord(const ShadowKey& key, const void* data,
                               uint64_t bytes);
// Checks `file` against `want` and `out_bytes` and copies the output into
// `out`; false with the reason (nothing copied) when it does not fit.
bool DecodeShadowRecord(std::string_view file, const ShadowKey& want, void* out,
                        uint64_t out_bytes, std::string* error);

// DIR/ShadowFileName(key), atomically; false with the reason.
bool WriteShadowRecord(const std::string& dir, const ShadowKey& key,
                       const void* data, uint64_t bytes, std::string* error);
// Reads and decodes DIR/ShadowFileName(key) into `out`.
bool ReadShadowRecord(const std::string& dir, const ShadowKey& key, void* out,
                      uint64_t out_bytes, std::string* error);

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_SHADOW_RECORD_H_
