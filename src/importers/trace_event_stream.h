// Streams the events of a Chrome-trace JSON file (PyTorch profiler / Kineto)
// one at a time, so traces of hundreds of MB need memory only for what the
// caller keeps.
//
//   class MySink : public TraceEventSink { void Event(const json& e) override;
//   }; MySink sink; ASSIGN_OR_RETURN(uint64_t n, StreamTraceEvents(in.get(),
//   path, &sink));
//
// Each element of the top-level "traceEvents" array is handed to
// TraceEventSink::Event as a small DOM; "distributedInfo" to Distributed().
// Errors are InvalidArgument naming the file and the byte offset (after
// decompression) of bad JSON, an empty file, or a top level that is not an
// object; read/decompression errors come from the InputStream.
#ifndef PITSTOP_IMPORTERS_TRACE_EVENT_STREAM_H_
#define PITSTOP_IMPORTERS_TRACE_EVENT_STREAM_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "src/importers/input_file.h"

namespace pitstop::importers {

// Receives trace events. Called on the thread that runs StreamTraceEvents.
class TraceEventSink {
 public:
  virtual ~TraceEventSink() = default;
  // One element of "traceEvents" (usually an object; callers check).
  virtual void Event(const nlohmann::json& event) = 0;
  // The "distributedInfo" object, when the trace has one.
  virtual void Distributed(const nlohmann::json& /*info*/) {}
};

// Parses the trace from `in`, calling `sink` per event. Returns the number of
// events seen. `progress`, if set, is called about every 16 MiB with
// (compressed bytes read, file size).
absl::StatusOr<uint64_t> StreamTraceEvents(
    InputStream* in, const std::string& file, TraceEventSink* sink,
    const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_TRACE_EVENT_STREAM_H_
