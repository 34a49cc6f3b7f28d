// Fuzzes the streaming Kineto / Chrome-trace reader (gzip or not) and the
// cross-rank job builder (the input is read as two ranks' traces).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/importers/input_file.h"
#include "src/importers/kineto_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<pitstop::importers::KinetoTrace> traces;
  for (int rank = 0; rank < 2; ++rank) {
    auto in = pitstop::importers::InputStream::FromMemory(bytes, "fuzz");
    auto t = pitstop::importers::ParseKinetoTrace(
        in.get(), rank == 0 ? "r-0.json" : "r-1.json");
    if (!t.ok()) return 0;
    t->rank = rank;
    traces.push_back(std::move(*t));
  }
  (void)pitstop::importers::BuildKinetoJob(std::move(traces), {});
  return 0;
}
