// The TCP connections of the CPU NCCL backend's ring all-reduce
// (ring_allreduce.h): one to this rank's left neighbour ((rank - 1) mod n,
// the rank it sends to) and one from its right neighbour ((rank + 1) mod n,
// the rank it receives from). Data moves in the calling thread on
// non-blocking sockets under poll(2): no helper thread, no lock.
//
// Why not gloo's pairs: a gloo TCP pair hands every incoming message to the
// device's event-loop thread, which must take the pair's mutex; when it
// cannot (the caller holds it while posting the next send or receive) it
// returns to a level-triggered epoll_wait that fires again at once. If the
// caller is preempted while holding that mutex, which happens all the time
// on a loaded machine, the loop thread spins on its CPU until the
// scheduler's tick (4 ms at HZ=250) runs the caller again. A small
// all-reduce, whose segments are in flight while the caller posts the next
// ones, then takes ~4 ms instead of ~0.1 ms (docs/benchmarks.md, "CPU NCCL
// all-reduce latency", has the traces).
//
// Thread safety: one thread at a time (the communicator's).
#ifndef PITSTOP_SRC_NCCL_CPU_RING_TRANSPORT_H_
#define PITSTOP_SRC_NCCL_CPU_RING_TRANSPORT_H_

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pitstop::cpunccl {

class RingTransport {
 public:
  // Binds a listening socket to `local`'s address (any port). Unavailable
  // if that fails.
  static absl::StatusOr<std::unique_ptr<RingTransport>> Listen(
      const sockaddr_storage& local);
  ~RingTransport();
  RingTransport(const RingTransport&) = delete;
  RingTransport& operator=(const RingTransport&) = delete;

  // Where the right neighbour connects to (the bound port filled in).
  const sockaddr_storage& listen_address() const { return listen_address_; }

  // Connects to the left neighbour's listen_address() and accepts the right
  // neighbour's connection. Each connection starts with a hello naming the
  // communicator (`comm_id`) and the sender's rank; others are refused.
  // DeadlineExceeded if the ring is not complete within `timeout`,
  // Unavailable if the left neighbour cannot be reached.
  absl::Status Connect(const sockaddr_storage& left, int left_rank,
                       int right_rank, int rank, uint64_t comm_id,
                       std::chrono::milliseconds timeout);

  // Sends `out` (up to two parts) to the left neighbour while receiving
  // exactly `in`'s bytes from the right one, both at once. After each read,
  // `on_recv(n)` learns that the first n bytes of `in` have landed; an error
  // it returns ends the exchange. Unavailable if a neighbour closed its
  // connection or failed, DeadlineExceeded if neither direction moved for
  // the connect timeout.
  struct Parts {
    iovec part[2] = {};
  };
  absl::Status Exchange(const Parts& out, const Parts& in,
                        absl::FunctionRef<absl::Status(size_t)> on_recv);

  // Closes both connections (shutdown first): a neighbour blocked on this
  // rank fails at once instead of at its timeout. Idempotent.
  void Close();

 private:
  RingTransport() = default;
  absl::Status AcceptRight(uint64_t comm_id,
                           std::chrono::steady_clock::time_point deadline);

  int listen_fd_ = -1;
  int left_fd_ = -1;   // to (rank - 1) mod n
  int right_fd_ = -1;  // from (rank + 1) mod n
  int left_rank_ = -1;
  int right_rank_ = -1;
  sockaddr_storage listen_address_ = {};
  std::chrono::milliseconds timeout_{0};
};

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_RING_TRANSPORT_H_
