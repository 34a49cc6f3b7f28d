// The leaver -> joiner state transfer of a migration, over the 2-rank
// transfer communicator (leaver rank 0, joiner rank 1; docs/migration.md
// "Two-phase rebuild and state transfer (library)").
//
// The state is what the trainer registered (pitstop_trainer_register_state):
// named host buffers, sent in registration order. The exchange:
//
//   leaver                                   joiner
//   u64 header size, header      ──────►    decodes it, compares names and
//                                            sizes with its own buffers
//                                ◄──────    u64 verdict (0: they match)
//   every buffer (if matched)    ──────►    into staging memory, FNV-1a
//                                ◄──────    u64 verdict (0: checksum ok)
//
// so a joiner whose state does not match refuses before any buffer moves
// (the leaver never blocks sending what nobody receives), and the joiner's
// buffers are written only once everything arrived intact.
//
// Header: "PSTXFR01", u64 next step, u32 buffer count, per buffer u32 name
// length, the name, u64 size; u32 count of communicator counters, a u64
// each (operations enqueued per rebuilt communicator at the switch); u64
// FNV-1a over every buffer's bytes in order. Little-endian.
//
// Not thread-safe; called from the trainer's thread (its poll or join).
#ifndef PITSTOP_PLUGIN_STATE_TRANSFER_H_
#define PITSTOP_PLUGIN_STATE_TRANSFER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plugin/rebuild_nccl.h"

namespace pitstop::plugin {

struct StateBuffer {
  std::string name;
  void* data = nullptr;
  uint64_t bytes = 0;
};

struct TransferHeader {
  uint64_t next_step = 0;
  std::vector<std::pair<std::string, uint64_t>> buffers;  // name, size
  std::vector<uint64_t> enqueued;
  uint64_t checksum = 0;
};

std::string EncodeTransferHeader(const TransferHeader& h);
// False with `*error` (offset and what) on anything malformed.
bool DecodeTransferHeader(const std::string& bytes, TransferHeader* h,
                          std::string* error);
// FNV-1a of the buffers' bytes, in order.
uint64_t StateChecksum(const std::vector<StateBuffer>& buffers);
// Empty when `h` describes the same buffers (names, sizes, order) as
// `mine`; else what differs, for the joiner's error.
std::string CompareState(const TransferHeader& h,
                         const std::vector<StateBuffer>& mine);

// Leaver: sends the header and, once the joiner accepted it, the buffers.
bool SendState(const NcclOps& ops, NcclComm transfer,
               const std::vector<StateBuffer>& buffers, uint64_t next_step,
               const std::vector<uint64_t>& enqueued, std::string* error);
// Joiner: receives and checks the state, then fills `mine`. `*header` gets
// the leaver's header (next step, counters). On a failed send or receive,
// `*failed` (when given) gets NCCL's result: ncclRemoteError when the
// leaver's end closed (it exited or failed).
bool ReceiveState(const NcclOps& ops, NcclComm transfer,
                  const std::vector<StateBuffer>& mine, TransferHeader* header,
                  std::string* error, NcclResult* failed = nullptr);

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_STATE_TRANSFER_H_
