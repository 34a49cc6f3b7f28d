#include "src/nccl/cpu/ring_allreduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/status_macros.h"

namespace pitstop::cpunccl {
namespace {

constexpr uint32_t kStepMagic = 0x50534152;  // "PSAR"

size_t RoundUp(size_t v, size_t m) { return (v + m - 1) / m * m; }
size_t CeilDiv(size_t v, size_t d) { return (v + d - 1) / d; }

int Mod(int v, int n) { return ((v % n) + n) % n; }

std::string Describe(const RingStepHeader& h) {
  return absl::StrCat("all-reduce #", h.seq, " of ", h.total_bytes,
                      " bytes, datatype ", h.datatype, ", op ", h.op,
                      ", message ", h.step);
}

// One link's message sequence within an all-reduce: the header of the
// next message sent or expected.
struct Messages {
  RingStepHeader next;
  RingStepHeader Take() { return std::exchange(next, Bump(next)); }
  static RingStepHeader Bump(RingStepHeader h) {
    ++h.step;
    return h;
  }
};

absl::Status CheckHeader(const RingStepHeader& got, const RingStepHeader& want,
                         int from) {
  if (std::memcmp(&got, &want, sizeof(got)) == 0) return absl::OkStatus();
  if (got.magic != kStepMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", from,
        " sent something other than an all-reduce message "
        "(ranks called different collectives?); this rank expected ",
        Describe(want)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "rank ", from, "'s call does not match this rank's: it sent ",
      Describe(got), ", this rank expected ", Describe(want),
      " (different count, datatype or op?)"));
}

// The state of one reduce-scatter or all-gather step on this rank.
class Step {
 public:
  Step(RingTransport& t, const RingAllReduceArgs& a, int from)
      : t_(t), a_(a), from_(from) {}

  // Sends `send_len` bytes at `send` (one message) while receiving one
  // message of `recv_len` bytes into `recv`; `reduce_at` (or nullptr)
  // is where the received elements are reduced into as they land.
  absl::Status Exchange(const RingStepHeader* out_hdr, const char* send,
                        size_t send_len, const RingStepHeader* in_hdr,
                        char* recv, size_t recv_len, char* reduce_at) {
    RingStepHeader got = {};
    RingTransport::Parts out, in;
    if (out_hdr != nullptr) {
      out.part[0] = {const_cast<RingStepHeader*>(out_hdr), sizeof(*out_hdr)};
      out.part[1] = {const_cast<char*>(send), send_len};
    }
    if (in_hdr != nullptr) {
      in.part[0] = {&got, sizeof(got)};
      in.part[1] = {recv, recv_len};
    }
    bool checked = false;
    size_t reduced = 0;  // elements
    return t_.Exchange(out, in, [&](size_t landed) -> absl::Status {
      if (landed < sizeof(got)) return absl::OkStatus();
      if (!checked) {
        RETURN_IF_ERROR(CheckHeader(got, *in_hdr, from_));
        checked = true;
      }
      if (reduce_at == nullptr) return absl::OkStatus();
      const size_t whole = (landed - sizeof(got)) / a_.element_bytes;
      if (whole > reduced) {
        const size_t off = reduced * a_.element_bytes;
        a_.fn(reduce_at + off, reduce_at + off, recv + off, whole - reduced);
        reduced = whole;
      }
      return absl::OkStatus();
    });
  }

 private:
  RingTransport& t_;
  const RingAllReduceArgs& a_;
  const int from_;
};

}  // namespace

RingLayout::RingLayout(size_t total, size_t element_bytes, int n_ranks,
                       size_t max_segment_bytes)
    : total_bytes(total) {
  const size_t n = static_cast<size_t>(n_ranks);
  const size_t max_segment =
      element_bytes * std::max<size_t>(1, max_segment_bytes / element_bytes);
  const size_t segments =
      RoundUp(std::max(CeilDiv(total, max_segment), 2 * n), n);
  const size_t segment_bytes = RoundUp(CeilDiv(total, segments), element_bytes);
  chunk_bytes = segments / n * segment_bytes;
}

size_t RingLayout::Offset(int chunk) const {
  return std::min(total_bytes, static_cast<size_t>(chunk) * chunk_bytes);
}

size_t RingLayout::Length(int chunk) const {
  return std::min(chunk_bytes, total_bytes - Offset(chunk));
}

absl::Status RingAllReduce(RingTransport& transport, const RingAllReduceArgs& a,
                           std::vector<char>* scratch) {
  const int n = a.n_ranks, r = a.rank;
  if (n == 1 || a.count == 0) return absl::OkStatus();
  const size_t total = a.count * a.element_bytes;
  const RingLayout layout(total, a.element_bytes, n);
  char* out = static_cast<char*>(a.buf);
  const RingStepHeader first = {kStepMagic, 0, a.seq, total, a.datatype, a.op};
  Messages to_left{first}, from_right{first};
  Step step(transport, a, Mod(r + 1, n));
  const size_t window = std::min(a.window_bytes, layout.chunk_bytes);
  if (scratch->size() < window) scratch->resize(window);

  // Reduce-scatter: a chunk goes as max(1, ceil(length / window)) messages;
  // both ends of a link count them alike.
  for (int k = 0; k + 1 < n; ++k) {
    const int s = Mod(r + 1 + k, n), v = Mod(r + 2 + k, n);
    const size_t s_len = layout.Length(s), v_len = layout.Length(v);
    const size_t s_msgs = std::max<size_t>(1, CeilDiv(s_len, window));
    const size_t v_msgs = std::max<size_t>(1, CeilDiv(v_len, window));
    for (size_t j = 0; j < std::max(s_msgs, v_msgs); ++j) {
      const size_t s_at = std::min(s_len, j * window);
      const size_t v_at = std::min(v_len, j * window);
      RingStepHeader out_hdr = {}, in_hdr = {};
      if (j < s_msgs) out_hdr = to_left.Take();
      if (j < v_msgs) in_hdr = from_right.Take();
      RETURN_IF_ERROR(step.Exchange(
          j < s_msgs ? &out_hdr : nullptr, out + layout.Offset(s) + s_at,
          std::min(window, s_len - s_at), j < v_msgs ? &in_hdr : nullptr,
          scratch->data(), std::min(window, v_len - v_at),
          out + layout.Offset(v) + v_at));
    }
  }
  // All-gather: one message per chunk, straight into the output.
  for (int k = 0; k + 1 < n; ++k) {
    const int s = Mod(r + k, n), v = Mod(r + 1 + k, n);
    const RingStepHeader out_hdr = to_left.Take();
    const RingStepHeader in_hdr = from_right.Take();
    RETURN_IF_ERROR(step.Exchange(
        &out_hdr, out + layout.Offset(s), layout.Length(s), &in_hdr,
        out + layout.Offset(v), layout.Length(v), nullptr));
  }
  return absl::OkStatus();
}

}  // namespace pitstop::cpunccl
