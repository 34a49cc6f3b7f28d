// Copies a StatusOr's value into a response field (the adapters' common
// step): the status is the call's.
#ifndef PITSTOP_CONTROLLER_API_TAKE_H_
#define PITSTOP_CONTROLLER_API_TAKE_H_

#include <utility>

#include "absl/status/statusor.h"

namespace pitstop::controller {

template <typename T>
absl::Status Take(absl::StatusOr<T> v, T* out) {
  if (!v.ok()) return v.status();
  *out = std::move(*v);
  return absl::OkStatus();
}

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_API_TAKE_H_
