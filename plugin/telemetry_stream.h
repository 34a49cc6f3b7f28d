// One Telemetry/StreamTelemetry call on a Unix socket, as raw bytes (the
// library has no Protobuf; see wire.h): grpc::GenericStub over ByteBuffers,
// callback API. The exporter thread calls every method; gRPC's threads run
// the reactions. Created and deleted (after Done()) by the exporter thread.
//
// Kept apart, with no gRPC type in this header, because its body is mostly
// gRPC's inlined templates, whose synchronisation lives in Debian's
// uninstrumented gRPC: TSan builds compile telemetry_stream.cc without
// instrumentation (plugin/CMakeLists.txt).
#ifndef PITSTOP_PLUGIN_TELEMETRY_STREAM_H_
#define PITSTOP_PLUGIN_TELEMETRY_STREAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plugin/wire.h"

namespace pitstop::plugin {

class TelemetryStream {
 public:
  // Starts the call. `dropped` counts the records of writes that fail.
  TelemetryStream(const std::string& socket_path,
                  std::atomic<uint64_t>* dropped);
  // REQUIRES: Done() (or the stream is leaked, see Exporter).
  ~TelemetryStream();
  TelemetryStream(const TelemetryStream&) = delete;
  TelemetryStream& operator=(const TelemetryStream&) = delete;

  // Starts writing `request` (an encoded StreamTelemetryRequest holding
  // `records` records); `last` half-closes after it. False if a write is in
  // flight or the stream is over.
  bool TryWrite(const std::string& request, uint32_t records, bool last);
  bool Writable();
  bool Broken();  // failed, cancelled or finished
  bool Done();    // gRPC is finished with it (safe to delete)
  // Wait until Done() / no write in flight, or the deadline
  // (CLOCK_MONOTONIC ns). False on timeout (WaitWritable: or stream over).
  bool WaitDone(uint64_t deadline_ns);
  bool WaitWritable(uint64_t deadline_ns);
  void Cancel();
  bool delivered_any();
  // Activation commands received since the last call.
  std::vector<Activation> TakeCommands();

 private:
  class Reactor;
  Reactor* reactor_;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_TELEMETRY_STREAM_H_
