// Where `pitstop plan --plan-out` may write, and writing there safely
// (docs/planning.md, "--plan-out"): the plan goes to a temporary file in
// the same directory, renamed over the path when complete, so a crash
// leaves no half-written plan and a symbolic link at the path is replaced,
// never written through.
#ifndef PITSTOP_TOOLS_PITSTOP_PLAN_OUT_H_
#define PITSTOP_TOOLS_PITSTOP_PLAN_OUT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pitstop::tool {

// InvalidArgument naming --plan-out, checked before the evaluation (which
// can take minutes), for a path that
// - is empty, a directory, or lies in no directory;
// - is one of `inputs` (the fabric file, the host map; a link to one too);
// - is a device, FIFO or socket (never replaced);
// - holds something other than an earlier plan, unless `force`: a file
//   that is neither empty nor starts as a plan does ('{' then "epoch"), or
//   a symbolic link (dangling or not). Overwriting them is what a shell
//   redirection does and what --plan-out did before; --force replaces the
//   entry (a link itself, not what it points to).
absl::Status CheckPlanOut(const std::string& path,
                          const std::vector<std::string>& inputs, bool force);

// Writes `text` to a new file in the directory of `path` and renames it to
// `path` (replacing what is there). InvalidArgument naming --plan-out and
// the reason when it cannot; the temporary file is removed then.
absl::Status ReplaceFile(const std::string& path, const std::string& text);

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_PLAN_OUT_H_
