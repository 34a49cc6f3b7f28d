// The telemetry transport between the in-process library and the agent
// (docs/plugin.md, "Transport"): shared by both sides, header only, std only
// (the library must not link anything else).
//
// Model: Perfetto's producer/service split. Each process (producer) creates
// one memfd holding a single-producer single-consumer byte ring, seals its
// size, and hands it to the agent over the agent's Unix socket (SCM_RIGHTS)
// in its Hello frame. Telemetry goes through the ring as messages, each an
// encoded pitstop.v1.StreamTelemetryRequest (telemetry.proto stays the one
// contract). The socket carries a small framed control protocol:
//
//   process -> agent   kHello (+ memfd), kHeartbeat, kGoodbye
//   agent -> process   kHelloAck, kActivation (encoded StreamTelemetryResponse)
//
// The ring memory outlives the process while the agent maps it, so what was
// written before exit() or a crash is still read; the process never waits
// for the agent. What the agent did not consume when a connection broke is
// counted as dropped by the process (records_written - records_read).
//
// Everything a peer sends is untrusted: sizes are checked against the
// limits below; a violation closes that one connection.
#ifndef PITSTOP_SHM_TRANSPORT_H_
#define PITSTOP_SHM_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pitstop::shm {

inline constexpr uint32_t kProtocolVersion = 1;

// ---- Control frames (little-endian, native layout on x86-64/aarch64) ----

enum FrameType : uint16_t {
  kFrameHello = 1,       // process -> agent, carries the ring's memfd
  kFrameHelloAck = 2,    // agent -> process: AckFrame
  kFrameActivation = 3,  // agent -> process: StreamTelemetryResponse bytes
  kFrameHeartbeat = 4,   // process -> agent: CountersFrame
  kFrameGoodbye = 5,     // process -> agent: GoodbyeFrame
};

struct FrameHeader {
  uint32_t size;  // payload bytes after the header
  uint16_t type;  // FrameType
  uint16_t reserved;
};
static_assert(sizeof(FrameHeader) == 8);

// Largest payload either side accepts (an activation list is tiny; this
// leaves room without letting a peer make us allocate much).
inline constexpr uint32_t kMaxFramePayload = 64 * 1024;

// The process's cumulative counters since it started (over all
// connections): records its hot path produced, records dropped anywhere
// before reaching an agent (full rings, no agent, unread ring at a broken
// connection).
struct Counters {
  uint64_t records_produced;
  uint64_t records_dropped;
};
static_assert(sizeof(Counters) == 16);

struct HelloFrame {
  uint32_t protocol_version;  // kProtocolVersion
  uint32_t pid;
  uint64_t ring_bytes;  // data bytes of the ring (power of two)
  Counters counters;
  uint32_t reconnects;  // connections this process opened before this one
  uint32_t reserved;
  // --- Since library 0.2 (a 40-byte hello has neither; the agent accepts
  // both sizes). Lets the controller count what a killed agent had read
  // and never delivered (docs/reliability.md, "Lost without a count").
  //
  // Records agents read from this process's rings over its earlier
  // connections, as each ring's records_read said when that connection
  // ended (clamped to what was written).
  uint64_t records_delivered;
  // CLOCK_REALTIME when these counters started from zero (the library's
  // exporter started in this process): with the pid it names the counting
  // process, so a restarted rank (counters from zero, maybe the same pid in
  // a container) is never taken for the old one.
  uint64_t counters_start_unix_ns;
};
static_assert(sizeof(HelloFrame) == 56);
// The hello of library 0.1 (the fields up to `reserved`).
inline constexpr uint32_t kHelloFrameV1Size = 40;
static_assert(offsetof(HelloFrame, records_delivered) == kHelloFrameV1Size);

struct AckFrame {
  uint32_t protocol_version;
  uint32_t reserved;
};
static_assert(sizeof(AckFrame) == 8);

struct GoodbyeFrame {
  uint32_t reason;  // ProcessGoodbye.Reason (1 finalize, 2 exit)
  uint32_t reserved;
  Counters counters;
};
static_assert(sizeof(GoodbyeFrame) == 24);

// ---- The shared ring ----
//
// Layout of the memfd: RingHeader, then `ring_bytes` of data. Positions are
// byte counts since the start (never wrap); offset = pos & (ring_bytes - 1).
// A message is MessageHeader + payload, padded to 8 bytes, never split at
// the end of the data area: when it does not fit before the end, the
// producer writes a MessageHeader with size kPadMarker and continues at
// offset 0.
inline constexpr uint32_t kRingMagic = 0x50535452;  // "PSTR"
inline constexpr uint64_t kMinRingBytes = 64 * 1024;
inline constexpr uint64_t kMaxRingBytes = 256ull << 20;

struct RingHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t ring_bytes;
  char pad0[48];
  // Producer-written.
  std::atomic<uint64_t> write_pos;
  std::atomic<uint64_t> records_written;
  char pad1[48];
  // Consumer-written.
  std::atomic<uint64_t> read_pos;
  std::atomic<uint64_t> records_read;
  char pad2[48];
};
static_assert(sizeof(RingHeader) == 192);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct MessageHeader {
  uint32_t size;     // payload bytes, or kPadMarker
  uint32_t records;  // telemetry records in the payload
};
static_assert(sizeof(MessageHeader) == 8);
inline constexpr uint32_t kPadMarker = 0xffffffffu;

inline constexpr uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

// Bytes a message of `payload` bytes takes in the ring (header + padding).
inline constexpr uint64_t MessageFootprint(uint64_t payload) {
  return sizeof(MessageHeader) + Align8(payload);
}

}  // namespace pitstop::shm

#endif  // PITSTOP_SHM_TRANSPORT_H_
