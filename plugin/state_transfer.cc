#include "plugin/state_transfer.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace pitstop::plugin {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'T', 'X', 'F', 'R', '0', '1'};
constexpr uint64_t kMaxHeaderBytes = 1 << 20;
constexpr int kLeaver = 0;
constexpr int kJoiner = 1;
// Joiner verdicts.
constexpr uint64_t kAccepted = 0;
constexpr uint64_t kStateDiffers = 1;
constexpr uint64_t kChecksumMismatch = 2;

// Buffers go in messages of up to this many bytes: consecutive small
// buffers share one (a torch job registers a buffer per tensor, and one
// send/recv round trip per buffer cost ~2 ms each on the CPU backend),
// a larger buffer goes alone, from its own memory.
constexpr uint64_t kMessageBytes = uint64_t{16} << 20;

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
uint64_t Fnv(uint64_t h, const void* p, uint64_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (uint64_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64: little-endian
  out->append(b, sizeof(T));
}

class Cursor {
 public:
  explicit Cursor(const std::string& s) : s_(s) {}
  template <typename T>
  bool Get(T* v, const char* what, std::string* error) {
    if (s_.size() - at_ < sizeof(T)) return Fail(what, error);
    std::memcpy(v, s_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool Bytes(size_t n, std::string* out, const char* what, std::string* error) {
    if (s_.size() - at_ < n) return Fail(what, error);
    out->assign(s_, at_, n);
    at_ += n;
    return true;
  }

 private:
  bool Fail(const char* what, std::string* error) {
    *error = "state header truncated at offset " + std::to_string(at_) +
             " reading " + what;
    return false;
  }
  const std::string& s_;
  size_t at_ = 0;
};

// Runs one send or recv to completion: a non-blocking communicator may
// answer ncclInProgress, then NCCL finishes it in the background.
// `*failed` (when given) gets NCCL's result of a failure.
bool Complete(const NcclOps& ops, NcclComm comm, NcclResult r, const char* what,
              std::string* error, NcclResult* failed = nullptr) {
  while (r == abi::kNcclInProgress) {
    if (ops.get_async_error(comm, &r) != abi::kNcclSuccess) {
      r = abi::kNcclInternalError;
    }
  }
  if (r == abi::kNcclSuccess) return true;
  *error = std::string(what) + ": " + DescribeNcclError(ops, comm, r);
  if (failed != nullptr) *failed = r;
  return false;
}

bool SendWord(const NcclOps& ops, NcclComm c, uint64_t v, int peer,
              const char* what, std::string* error,
              NcclResult* failed = nullptr) {
  return Complete(ops, c, ops.send(&v, sizeof(v), kNcclUint8, peer, c, nullptr),
                  what, error, failed);
}

bool RecvWord(const NcclOps& ops, NcclComm c, uint64_t* v, int peer,
              const char* what, std::string* error,
              NcclResult* failed = nullptr) {
  return Complete(ops, c, ops.recv(v, sizeof(*v), kNcclUint8, peer, c, nullptr),
                  what, error, failed);
}

// The messages that carry `buffers`: [first, last) of the buffers each,
// the same on both ends (their sizes were compared first).
std::vector<std::pair<size_t, size_t>> Messages(
    const std::vector<StateBuffer>& buffers) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t first = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (i > first && bytes + buffers[i].bytes > kMessageBytes) {
      out.emplace_back(first, i);
      first = i;
      bytes = 0;
    }
    bytes += buffers[i].bytes;
  }
  if (first < buffers.size()) out.emplace_back(first, buffers.size());
  return out;
}

uint64_t BytesOf(const std::vector<StateBuffer>& buffers, size_t first,
                 size_t last) {
  uint64_t n = 0;
  for (size_t i = first; i < last; ++i) n += buffers[i].bytes;
  return n;
}

}  // namespace

std::string EncodeTransferHeader(const TransferHeader& h) {
  std::string out(kMagic, sizeof(kMagic));
  Put<uint64_t>(&out, h.next_step);
  Put<uint32_t>(&out, static_cast<uint32_t>(h.buffers.size()));
  for (const auto& [name, size] : h.buffers) {
    Put<uint32_t>(&out, static_cast<uint32_t>(name.size()));
    out.append(name);
    Put<uint64_t>(&out, size);
  }
  Put<uint32_t>(&out, static_cast<uint32_t>(h.enqueued.size()));
  for (uint64_t n : h.enqueued) Put<uint64_t>(&out, n);
  Put<uint64_t>(&out, h.checksum);
  return out;
}

bool DecodeTransferHeader(const std::string& bytes, TransferHeader* h,
                          std::string* error) {
  if (bytes.size() < sizeof(kMagic) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    *error = "state header: bad magic at offset 0";
    return false;
  }
  Cursor c(bytes);
  std::string magic;
  uint32_t n = 0;
  if (!c.Bytes(sizeof(kMagic), &magic, "magic", error) ||
      !c.Get(&h->next_step, "next step", error) ||
      !c.Get(&n, "buffer count", error)) {
    return false;
  }
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t len = 0;
    std::string name;
    uint64_t size = 0;
    if (!c.Get(&len, "name length", error) ||
        !c.Bytes(len, &name, "name", error) ||
        !c.Get(&size, "buffer size", error)) {
      return false;
    }
    h->buffers.emplace_back(std::move(name), size);
  }
  if (!c.Get(&n, "counter count", error)) return false;
  h->enqueued.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (!c.Get(&h->enqueued[i], "counter", error)) return false;
  }
  return c.Get(&h->checksum, "checksum", error);
}

uint64_t StateChecksum(const std::vector<StateBuffer>& buffers) {
  uint64_t h = kFnvOffset;
  for (const StateBuffer& b : buffers) h = Fnv(h, b.data, b.bytes);
  return h;
}

std::string CompareState(const TransferHeader& h,
                         const std::vector<StateBuffer>& mine) {
  if (h.buffers.size() != mine.size()) {
    return "the leaver sent " + std::to_string(h.buffers.size()) +
           " state buffer(s), this process registered " +
           std::to_string(mine.size());
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& [name, size] = h.buffers[i];
    if (name != mine[i].name) {
      return "state buffer " + std::to_string(i) + " is '" + mine[i].name +
             "' here, '" + name + "' on the leaver";
    }
    if (size != mine[i].bytes) {
      return "state buffer '" + name + "' is " + std::to_string(mine[i].bytes) +
             " bytes here, " + std::to_string(size) + " bytes on the leaver";
    }
  }
  return "";
}

bool SendState(const NcclOps& ops, NcclComm c,
               const std::vector<StateBuffer>& buffers, uint64_t next_step,
               const std::vector<uint64_t>& enqueued, std::string* error) {
  TransferHeader h;
  h.next_step = next_step;
  for (const StateBuffer& b : buffers) h.buffers.emplace_back(b.name, b.bytes);
  h.enqueued = enqueued;
  h.checksum = StateChecksum(buffers);
  const std::string bytes = EncodeTransferHeader(h);
  if (!SendWord(ops, c, bytes.size(), kJoiner, "sending the header size",
                error) ||
      !Complete(
          ops, c,
          ops.send(bytes.data(), bytes.size(), kNcclUint8, kJoiner, c, nullptr),
          "sending the header", error)) {
    return false;
  }
  uint64_t verdict = ~uint64_t{0};
  if (!RecvWord(ops, c, &verdict, kJoiner, "waiting for the joiner", error)) {
    return false;
  }
  if (verdict != kAccepted) {
    *error =
        "the joiner refused the state (its buffers differ from this "
        "process's; its log says how)";
    return false;
  }
  std::string packed;
  for (const auto& [first, last] : Messages(buffers)) {
    const void* data = buffers[first].data;
    const uint64_t n = BytesOf(buffers, first, last);
    if (last - first > 1) {
      packed.clear();
      for (size_t i = first; i < last; ++i) {
        if (buffers[i].bytes == 0) continue;
        packed.append(static_cast<const char*>(buffers[i].data),
                      buffers[i].bytes);
      }
      data = packed.data();
    }
    if (!Complete(ops, c, ops.send(data, n, kNcclUint8, kJoiner, c, nullptr),
                  "sending the state", error)) {
      return false;
    }
  }
  if (!RecvWord(ops, c, &verdict, kJoiner, "waiting for the joiner", error)) {
    return false;
  }
  if (verdict != kAccepted) {
    *error = "the joiner received the state with a checksum mismatch";
    return false;
  }
  return true;
}

bool ReceiveState(const NcclOps& ops, NcclComm c,
                  const std::vector<StateBuffer>& mine, TransferHeader* h,
                  std::string* error, NcclResult* failed) {
  uint64_t size = 0;
  if (!RecvWord(ops, c, &size, kLeaver, "receiving the header size", error,
                failed)) {
    return false;
  }
  if (size > kMaxHeaderBytes) {
    *error = "the leaver announced a state header of " + std::to_string(size) +
             " bytes";
    return false;
  }
  std::string bytes(size, '\0');
  if (!Complete(ops, c,
                ops.recv(bytes.data(), size, kNcclUint8, kLeaver, c, nullptr),
                "receiving the header", error, failed) ||
      !DecodeTransferHeader(bytes, h, error)) {
    return false;
  }
  const std::string differs = CompareState(*h, mine);
  const uint64_t verdict = differs.empty() ? kAccepted : kStateDiffers;
  if (!SendWord(ops, c, verdict, kLeaver, "answering the leaver", error,
                failed)) {
    return false;
  }
  if (!differs.empty()) {
    *error = "state does not match the leaver's: " + differs;
    return false;
  }
  // One staging area for everything: nothing is written into the
  // trainer's buffers before the checksum says the state is whole.
  std::string staging(BytesOf(mine, 0, mine.size()), '\0');
  std::vector<StateBuffer> received = mine;
  uint64_t at = 0;
  for (const auto& [first, last] : Messages(mine)) {
    const uint64_t n = BytesOf(mine, first, last);
    if (!Complete(
            ops, c,
            ops.recv(staging.data() + at, n, kNcclUint8, kLeaver, c, nullptr),
            "receiving the state", error, failed)) {
      return false;
    }
    for (size_t i = first; i < last; ++i) {
      received[i].data = staging.data() + at;
      at += mine[i].bytes;
    }
  }
  const bool intact = StateChecksum(received) == h->checksum;
  if (!SendWord(ops, c, intact ? kAccepted : kChecksumMismatch, kLeaver,
                "answering the leaver", error, failed)) {
    return false;
  }
  if (!intact) {
    *error = "the state arrived with a checksum mismatch";
    return false;
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].bytes > 0) {
      std::memcpy(mine[i].data, received[i].data, mine[i].bytes);
    }
  }
  return true;
}

}  // namespace pitstop::plugin
