// Status propagation macros. Debian 12's Abseil (20220623) has no
// absl/status/status_macros.h, so pitstop keeps this one small header.
//
//   RETURN_IF_ERROR(DoThing());              // returns the status if !ok()
//   ASSIGN_OR_RETURN(auto x, ComputeX());    // x = value, or return status
//   ASSIGN_OR_RETURN(x_, ComputeX());        // existing lvalue works too
#ifndef PITSTOP_STATUS_MACROS_H_
#define PITSTOP_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PITSTOP_STATUS_CONCAT_INNER_(a, b) a##b
#define PITSTOP_STATUS_CONCAT_(a, b) PITSTOP_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    const ::absl::Status pitstop_status_ = (expr);     \
    if (!pitstop_status_.ok()) return pitstop_status_; \
  } while (0)

#define PITSTOP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  PITSTOP_ASSIGN_OR_RETURN_IMPL_(    \
      PITSTOP_STATUS_CONCAT_(pitstop_statusor_, __LINE__), lhs, rexpr)

#endif  // PITSTOP_STATUS_MACROS_H_
