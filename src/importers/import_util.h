// Small helpers shared by the importers: names of NCCL functions and data
// types as other tools spell them, stable communicator hashes, rank lists.
#ifndef PITSTOP_IMPORTERS_IMPORT_UTIL_H_
#define PITSTOP_IMPORTERS_IMPORT_UTIL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "pitstop/v1/common.pb.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::importers {

// "nccl:all_to_all", "_allgather_base", "ncclDevKernel_AllReduce_Sum_f32",
// "ReduceScatter", "allreduce", "nccl:send 0->3", ... -> CollFunc
// (COLL_FUNC_OTHER when not recognised). SendRecv kernels -> SEND_RECV.
v1::CollFunc ParseCollFunc(absl::string_view name);

// "BFloat16", "Float", "float32", "Half", "ncclFloat32", "c10::BFloat16",
// ... -> DataType; *size_bytes gets the element size (1 when unknown).
v1::DataType ParseDataType(absl::string_view name, uint32_t* size_bytes);

// Highest world size / global rank + 1 accepted from any source.
inline constexpr int32_t kMaxWorldSize = 1 << 20;

// "0-3,7,9-11" for a sorted list of ranks.
std::string RankRanges(const std::vector<int32_t>& sorted);

// "non-comm-hang", "comm-slow", "process-died", ... ("none" for unspecified).
const char* FaultClassLabel(v1::FaultClass c);

// Short display name of a function ("all_reduce", "send", ...).
const char* CollFuncName(v1::CollFunc func);

// `v` converted to int64, saturating at the type's limits (NaN -> 0):
// numbers in untrusted JSON may be anything.
int64_t SaturatingInt(double v);

// `s` with every byte that is not part of a valid UTF-8 sequence (and
// control characters) replaced by '?', at most `max_bytes` bytes: names from
// untrusted files end up in proto3 strings and JSON, which need UTF-8.
std::string CleanText(absl::string_view s, size_t max_bytes = 256);

// FNV-1a 64 of `key`, never 0 (0 means "unknown" in the protocol).
uint64_t StableHash(absl::string_view key);

// "[0, 1, 4]" (a Python list printed as text) or a JSON array of ints.
// Returns false on anything else, and on ranks outside [0, kMaxWorldSize)
// or repeated ranks.
bool ParseRankList(const nlohmann::json& value, std::vector<int32_t>* out);

// Trailing decimal digits of a file name ("_dump_12" -> 12, "rank-1.json.gz"
// -> 1 (digits before the extensions)); -1 if none.
int32_t RankFromFileName(absl::string_view path);

// Host used when a source names none: "<prefix>node<rank / ranks_per_node>".
std::string SyntheticHost(absl::string_view prefix, int32_t global_rank,
                          int32_t ranks_per_node);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_IMPORT_UTIL_H_
