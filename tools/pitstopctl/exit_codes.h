// pitstopctl exit codes (documented in docs/controller.md and --help).
#ifndef PITSTOP_TOOLS_PITSTOPCTL_EXIT_CODES_H_
#define PITSTOP_TOOLS_PITSTOPCTL_EXIT_CODES_H_

namespace pitstop::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFaultsPresent = 1;  // `faults --fail-if-any`
inline constexpr int kExitUsage = 2;          // bad flags / arguments
inline constexpr int kExitUnreachable = 3;    // controller down / timeout
inline constexpr int kExitNotFound = 4;       // unknown fault / node / job
inline constexpr int kExitRejected =
    5;  // INVALID_ARGUMENT, FAILED_PRECONDITION, PERMISSION_DENIED
inline constexpr int kExitError = 6;  // anything else

}  // namespace pitstop::ctl

#endif  // PITSTOP_TOOLS_PITSTOPCTL_EXIT_CODES_H_
