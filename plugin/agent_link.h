// The process side of one connection to the agent (include/pitstop/
// shm_transport.h): a Unix socket for control frames and a sealed memfd
// ring the agent maps. Never blocks: the socket is non-blocking, frames
// that do not fit the socket buffer wait in a small queue (heartbeats are
// skipped instead), a message that does not fit the ring is refused.
//
// Created, used and deleted by the exporter thread only (after fork(), the
// child's runtime calls AbandonAfterFork from the forking thread).
#ifndef PITSTOP_PLUGIN_AGENT_LINK_H_
#define PITSTOP_PLUGIN_AGENT_LINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pitstop/shm_transport.h"
#include "plugin/wire.h"

namespace pitstop::plugin {

class AgentLink {
 public:
  // Connects to `socket_path`, creates a ring of `ring_bytes` (power of
  // two) and sends the hello with it. Null with `*error` set on failure.
  static std::unique_ptr<AgentLink> Connect(const std::string& socket_path,
                                            uint64_t ring_bytes,
                                            const shm::HelloFrame& hello,
                                            std::string* error);
  ~AgentLink();
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;

  // Appends one message (an encoded StreamTelemetryRequest holding
  // `records` records). False when the ring has no room now.
  bool Write(const std::string& payload, uint32_t records);
  // Whether a message of `payload` bytes can ever fit the ring.
  bool CanEverFit(size_t payload) const;
  // Reads pending control frames (activations and migration directives into
  // *out) and flushes queued
  // frames. False when the connection is over: the agent closed it, an
  // error, or a malformed frame (*error says which, with the offset).
  bool Poll(AgentMessages* out, std::string* error);
  // Best effort, never blocks; a heartbeat is skipped while frames wait.
  void SendHeartbeat(const shm::Counters& counters);
  void SendGoodbye(uint32_t reason, const shm::Counters& counters);
  // Records written to the ring that the agent has not consumed.
  uint64_t unread_records() const;
  // Records written into this connection's ring so far.
  uint64_t records_written() const { return records_written_; }
  bool acked() const { return acked_; }
  const std::string& peer() const { return peer_; }

  // In a forked child: closes the inherited socket (so the agent sees the
  // parent's close) and unmaps the ring without touching either peer.
  void AbandonAfterFork();

 private:
  AgentLink() = default;
  void QueueFrame(uint16_t type, const void* payload, uint32_t size);
  bool Flush(std::string* error);
  bool ParseFrames(AgentMessages* out, std::string* error);

  int fd_ = -1;
  std::string peer_;
  shm::RingHeader* header_ = nullptr;
  char* data_ = nullptr;
  uint64_t ring_bytes_ = 0;
  size_t map_bytes_ = 0;
  uint64_t write_pos_ = 0;
  uint64_t records_written_ = 0;
  std::string out_;         // frames not yet taken by the socket
  std::string in_;          // bytes received, not yet parsed
  uint64_t in_offset_ = 0;  // stream offset of in_[0]
  bool acked_ = false;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_AGENT_LINK_H_
