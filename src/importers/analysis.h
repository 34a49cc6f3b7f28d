// Offline analysis of an imported job with the controller's own detectors:
// the job's per-rank records go through the agent's per-rank join
// (pitstop_agent_join) and into the detection engine (pitstop_detect), fed
// as the live controller would be, with a FakeClock advanced past the hang
// timeouts and the detection windows. So `pitstop analyze` and a live
// controller share every detector.
//
//   ASSIGN_OR_RETURN(ImportedJob job, ImportPaths(paths, {}));
//   ASSIGN_OR_RETURN(AnalysisResult r, AnalyzeJob(job, {}));
//   std::cout << FormatVerdictTable(job, r);
#ifndef PITSTOP_IMPORTERS_ANALYSIS_H_
#define PITSTOP_IMPORTERS_ANALYSIS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/v1/controller.pb.h"
#include "src/importers/imported_job.h"
#include "src/importers/log_ends.h"

namespace pitstop::importers {

// The detection policy used for imported data: the controller defaults, but
// statistics trusted after 2 collectives and verdicts from a single window
// (an import is one snapshot, not a stream of windows).
v1::JobPolicy ImportedJobPolicy();

// The hang timeout of `policy`, for judging where logs end (log_ends.h).
LogEndOptions LogEndOptionsOf(const v1::JobPolicy& policy);

struct AnalysisOptions {
  // Zero fields take ImportedJobPolicy()'s.
  v1::JobPolicy policy;
  // How far the clock is moved past the last record, in steps, so hang
  // timeouts expire and faults are confirmed (2 x timeout).
  absl::Duration settle = absl::Seconds(60);
};

// The job-level verdict distilled from the engine's faults.
struct Verdict {
  // FAULT_CLASS_UNSPECIFIED when nothing was found.
  v1::FaultClass fault_class = v1::FAULT_CLASS_UNSPECIFIED;
  // Global ranks (or comm ranks when global ranks are unknown), sorted.
  std::vector<int32_t> suspects;
  std::vector<int32_t> victims;
  // "all_to_all seq 20537 in EXPERT_MODEL_PARALLEL_GROUP (pg 74)" for each
  // hang fault with suspects; the most telling first (most suspects, then
  // non-comm before comm hangs, then fault number).
  std::vector<std::string> hung_collectives;
  // Ranks whose records of a communicator end before their peers'
  // (log_ends.h): ordinary ends and "cannot tell" are kept from detection;
  // "stuck" ones are left to it.
  std::vector<LogEnd> log_ends;
  // True when no fault was found but some rank's end could not be told
  // apart from a stop: the table says "cannot tell" instead of "none".
  bool CannotTell() const;
};

struct AnalysisResult {
  // Open faults at the end (latest state of each fault id).
  std::vector<v1::Fault> faults;
  Verdict verdict;
};

// Runs join + detection. InvalidArgument if the engine rejects a record
// (with the engine's message).
absl::StatusOr<AnalysisResult> AnalyzeJob(const ImportedJob& job,
                                          const AnalysisOptions& options);

// Builds the verdict from a set of faults (also used by replay on the
// faults read back from a controller).
// Ranks in `absent` (members without a file) are left out of the victims.
Verdict VerdictFromFaults(const std::vector<v1::Fault>& faults,
                          const std::vector<int32_t>& absent = {});

// Human-readable report: warnings, the verdict (hung collectives primary
// first), a table row + evidence per fault with suspects, the suspect-less
// ones (groups stuck behind the primary fault) summed up in one line, and
// the first 20 notes; `verbose` lists every fault and note.
// `tool` heads the report ("pitstop analyze", "pitstop replay").
std::string FormatVerdictTable(const ImportedJob& job,
                               const std::vector<v1::Fault>& faults,
                               const Verdict& verdict,
                               const std::string& tool = "pitstop analyze",
                               bool verbose = false);

// The same as JSON: {"format", "job_id", "ranks", "missing_ranks",
// "verdict": {"fault_class", "suspects", "victims", "hung_collectives",
// "cannot_tell", "log_ends" (LogEndsJson)},
// "faults": [Fault as proto JSON], "warnings", "notes", "matched"}.
nlohmann::json VerdictJson(const ImportedJob& job,
                           const std::vector<v1::Fault>& faults,
                           const Verdict& verdict);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_ANALYSIS_H_
