#include "src/controller/api/parse_cost.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "pitstop/wire_cost.h"

namespace pitstop::controller {

absl::StatusOr<uint64_t> ParsedBytes(
    const google::protobuf::Descriptor* type,
    google::protobuf::io::ZeroCopyInputStream* in) {
  google::protobuf::io::CodedInputStream coded(in);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  WireCostOptions options;
  options.estimate_bytes = true;
  WireCost cost;
  if (MeasureWireCost(&coded, type, options, &cost) !=
      WireCostResult::kWithin) {
    return absl::InvalidArgumentError(
        absl::StrCat(type->full_name(), ": malformed wire format near byte ",
                     coded.CurrentPosition()));
  }
  return cost.bytes;
}

}  // namespace pitstop::controller
