// Fuzzes the Flight Recorder reader (pickle or JSON form) and the job
// builder on a single dump, with and without gzip around it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/importers/flight_recorder_reader.h"
#include "src/importers/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto plain = pitstop::importers::MaybeGunzip(
      bytes, "fuzz",
      pitstop::importers::DecompressLimits{.max_bytes = 64 << 20});
  if (!plain.ok()) return 0;
  auto dump = pitstop::importers::ParseFlightRecorderDump(*plain, "_dump_0");
  if (!dump.ok()) return 0;
  std::vector<pitstop::importers::FlightRecorderDump> dumps;
  dumps.push_back(std::move(*dump));
  pitstop::importers::FrJobOptions o;
  o.max_window = 256;
  (void)pitstop::importers::BuildFlightRecorderJob(std::move(dumps), o);
  return 0;
}
