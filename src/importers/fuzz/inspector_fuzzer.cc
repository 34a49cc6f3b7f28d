// Fuzzes the NCCL Inspector JSON Lines reader and the job builder.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/importers/input_file.h"
#include "src/importers/inspector_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto in = pitstop::importers::InputStream::FromMemory(bytes, "fuzz");
  auto f = pitstop::importers::ParseInspectorFile(in.get(), "fuzz.log");
  if (!f.ok()) return 0;
  std::vector<pitstop::importers::InspectorFile> files;
  files.push_back(std::move(*f));
  (void)pitstop::importers::BuildInspectorJob(std::move(files), {});
  return 0;
}
