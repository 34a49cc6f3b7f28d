#include "tuner/steering.h"

namespace pitstop::tuner {
namespace {

constexpr float kIgnore = -1.0f;

bool Allowed(const Steering& s, int algo, int proto) {
  bool algo_ok = s.algo_mask == 0 || (algo < 32 && (s.algo_mask >> algo) & 1);
  bool proto_ok =
      s.proto_mask == 0 || (proto < 32 && (s.proto_mask >> proto) & 1);
  return algo_ok && proto_ok;
}

}  // namespace

SteerOutcome ApplySteering(const Steering& s, float* table, int num_algo,
                           int num_proto, int* n_channels) noexcept {
  SteerOutcome out;
  if (table != nullptr && num_algo > 0 && num_proto > 0 &&
      (s.algo_mask != 0 || s.proto_mask != 0)) {
    bool any_allowed = false;
    for (int a = 0; a < num_algo; ++a) {
      for (int p = 0; p < num_proto; ++p) {
        if (table[a * num_proto + p] != kIgnore && Allowed(s, a, p)) {
          any_allowed = true;
        }
      }
    }
    if (!any_allowed) {
      out.nothing_allowed = true;
    } else {
      for (int a = 0; a < num_algo; ++a) {
        for (int p = 0; p < num_proto; ++p) {
          float& cell = table[a * num_proto + p];
          if (cell != kIgnore && !Allowed(s, a, p)) {
            cell = kIgnore;
            ++out.cells_disabled;
          }
        }
      }
    }
  }
  if (n_channels != nullptr) {
    int n = *n_channels;
    if (s.max_channels > 0 && (n <= 0 || n > s.max_channels)) {
      n = s.max_channels;
    }
    if (s.min_channels > 0 && n > 0 && n < s.min_channels) n = s.min_channels;
    if (n != *n_channels) {
      *n_channels = n;
      out.channels_set = true;
    }
  }
  return out;
}

}  // namespace pitstop::tuner
