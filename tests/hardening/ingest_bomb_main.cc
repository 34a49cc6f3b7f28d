// pitstop_ingest_bomb: issue #33 F7's attacks on a real agent's sockets,
// with no credential, and what another job on the node loses meanwhile
// (docs/reliability.md, "Bounded parsing"). Run by tools/ingest-bomb.sh,
// which reads the agent's peak RSS.
//
//   pitstop_ingest_bomb grpc SOCKET STREAMS
//     STREAMS gRPC streams at once, each a hello and one message of
//     2,000,000 empty OpRecords (2 bytes each: 4 MB, under the 4 MiB
//     limit); prints how each stream ended.
//   pitstop_ingest_bomb shm SHM_SOCKET SECONDS big|batches
//     A hostile ring of 16 MiB (one message of 7.5M empty records: "big",
//     or messages of 30,000: "batches"), made visible 1 s in, and another
//     job's ring of 64 KiB taking one 20-record message every 10 ms for
//     SECONDS; prints that job's messages sent and lost (no room in its
//     ring: the agent did not read it) and its longest wait for a read.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "pitstop/shm_transport.h"
#include "pitstop/v1/telemetry.pb.h"
#include "tests/agent/fake_rank.h"

namespace {

namespace v1 = pitstop::v1;
namespace shm = pitstop::shm;

// One process's shared-memory connection, written by hand.
struct Ring {
  int fd = -1;
  char* data = nullptr;
  shm::RingHeader* header = nullptr;
  uint64_t bytes = 0;
  uint64_t pos = 0;

  bool Open(const std::string& socket, uint64_t ring_bytes) {
    fd = socket_fd(socket);
    if (fd < 0) return false;
    const int memfd = memfd_create("bomb", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    const size_t total = sizeof(shm::RingHeader) + ring_bytes;
    if (ftruncate(memfd, static_cast<off_t>(total)) != 0) return false;
    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    void* map =
        mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    header = new (map) shm::RingHeader();
    header->magic = shm::kRingMagic;
    header->ring_bytes = ring_bytes;
    data = static_cast<char*>(map) + sizeof(shm::RingHeader);
    bytes = ring_bytes;
    shm::HelloFrame h{};
    h.protocol_version = shm::kProtocolVersion;
    h.pid = static_cast<uint32_t>(getpid());
    h.ring_bytes = ring_bytes;
    char buf[sizeof(shm::FrameHeader) + sizeof(h)];
    const shm::FrameHeader fh{sizeof(h), shm::kFrameHello, 0};
    std::memcpy(buf, &fh, sizeof(fh));
    std::memcpy(buf + sizeof(fh), &h, sizeof(h));
    iovec iov{buf, sizeof(buf)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &memfd, sizeof(int));
    const bool ok = sendmsg(fd, &msg, MSG_NOSIGNAL) == sizeof(buf);
    close(memfd);
    return ok;
  }
  static int socket_fd(const std::string& path) {
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(s);
      return -1;
    }
    return s;
  }
  // Writes one message if the ring has room (no wrap: tests stay short of
  // the end or restart at 0 through a pad marker); false when full.
  bool Write(const std::string& body, uint32_t records, bool publish = true) {
    const uint64_t need = shm::MessageFootprint(body.size());
    const uint64_t read = header->read_pos.load(std::memory_order_acquire);
    uint64_t off = pos & (bytes - 1);
    const uint64_t pad = off + need > bytes ? bytes - off : 0;
    if (pos + pad + need - read > bytes) return false;
    if (pad != 0) {
      const shm::MessageHeader m{shm::kPadMarker, 0};
      std::memcpy(data + off, &m, sizeof(m));
      pos += pad;
      off = 0;
    }
    const shm::MessageHeader m{static_cast<uint32_t>(body.size()), records};
    std::memcpy(data + off, &m, sizeof(m));
    std::memcpy(data + off + sizeof(m), body.data(), body.size());
    pos += need;
    if (publish) header->write_pos.store(pos, std::memory_order_release);
    return true;
  }
};

std::string EmptyOps(int n, bool hello) {
  v1::StreamTelemetryRequest r;
  if (hello) r.mutable_hello()->set_pid(static_cast<uint32_t>(getpid()));
  for (int i = 0; i < n; ++i) r.add_ops();
  return r.SerializeAsString();
}

int Grpc(const std::string& socket, int streams) {
  using pitstop::agent::testing::FakeRank;
  v1::StreamTelemetryRequest bomb;
  for (int i = 0; i < 2'000'000; ++i) bomb.add_ops();
  std::printf("message: %zu bytes\n", bomb.ByteSizeLong());
  std::vector<std::unique_ptr<FakeRank>> ranks;
  for (int i = 0; i < streams; ++i) {
    ranks.push_back(std::make_unique<FakeRank>(socket));
    v1::StreamTelemetryRequest hello;
    hello.mutable_hello()->set_pid(static_cast<uint32_t>(getpid()));
    ranks.back()->Send(hello);
  }
  std::vector<std::thread> senders;
  for (auto& r : ranks) senders.emplace_back([&] { r->Send(bomb); });
  for (auto& t : senders) t.join();
  absl::SleepFor(absl::Seconds(2));  // the agent parses (or refused)
  for (size_t i = 0; i < ranks.size(); ++i) {
    const grpc::Status st = ranks[i]->Close();
    std::printf("stream %zu: %s %s\n", i, st.ok() ? "OK" : "refused",
                st.error_message().c_str());
  }
  return 0;
}

int Shm(const std::string& socket, int seconds, bool big) {
  Ring hostile, other;
  if (!hostile.Open(socket, 16 << 20) || !other.Open(socket, 64 << 10)) {
    std::fprintf(stderr, "cannot connect to %s\n", socket.c_str());
    return 1;
  }
  std::thread attack([&] {
    absl::SleepFor(absl::Seconds(1));
    if (big) {
      hostile.Write(EmptyOps(7'500'000, true), 7'500'000, false);
    } else {
      hostile.Write(EmptyOps(30'000, true), 30'000, false);
      const std::string body = EmptyOps(30'000, false);
      while (hostile.Write(body, 30'000, false)) {
      }
    }
    hostile.header->write_pos.store(hostile.pos, std::memory_order_release);
  });
  v1::StreamTelemetryRequest r;
  r.mutable_hello()->set_pid(static_cast<uint32_t>(getpid()));
  other.Write(r.SerializeAsString(), 0);
  // 20 records a message (~1 KB): the 64 KiB ring holds ~0.6 s of them.
  v1::StreamTelemetryRequest batch;
  for (int i = 0; i < 20; ++i) {
    v1::OpRecord* op = batch.add_ops();
    op->set_op_id(1'000'000'000 + i);
    op->set_comm_hash(0x0123456789ABCDEFull);
    op->set_seq_number(1'000'000 + i);
    op->set_count(1 << 24);
    op->set_bytes(uint64_t{1} << 26);
    op->set_enqueue_start_cpu_ns(1'700'000'000'000'000'000ull);
    op->set_enqueue_stop_cpu_ns(1'700'000'000'000'000'001ull);
  }
  const std::string body = batch.SerializeAsString();
  int sent = 0, lost = 0;
  absl::Duration longest;
  absl::Time last_read = absl::Now();
  uint64_t last_pos = 0;
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  while (absl::Now() < end) {
    const uint64_t read = other.header->read_pos.load();
    if (read != last_pos || read == other.pos) {
      last_pos = read;
      last_read = absl::Now();
    }
    longest = std::max(longest, absl::Now() - last_read);
    ++sent;
    if (!other.Write(body, 20)) ++lost;
    absl::SleepFor(absl::Milliseconds(10));
  }
  attack.join();
  std::printf("other job: %d messages, %d lost, longest unread %s\n", sent,
              lost, absl::FormatDuration(longest).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "grpc" && argc == 4) return Grpc(argv[2], std::atoi(argv[3]));
  if (mode == "shm" && argc == 5) {
    return Shm(argv[2], std::atoi(argv[3]), std::string(argv[4]) == "big");
  }
  std::fprintf(stderr,
               "usage: %s grpc SOCKET STREAMS | shm SHM_SOCKET SECONDS "
               "big|batches\n",
               argv[0]);
  return 2;
}
