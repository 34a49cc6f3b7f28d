// Fuzzes the safe pickle decoder: any input must give a value or a clean
// InvalidArgument, never a crash, hang or unbounded allocation.
#include <cstddef>
#include <cstdint>

#include "src/importers/pickle_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto doc = pitstop::importers::DecodePickle(bytes, "fuzz");
  if (doc.ok())
    (void)doc->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
