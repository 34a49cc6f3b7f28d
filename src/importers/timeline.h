// Merged multi-rank timeline in the Chrome trace-event JSON format (loads in
// ui.perfetto.dev and chrome://tracing): one process per rank ("rank 12
// (host)"), one thread per stream or process group, each operation with
// known times as a complete ("X") slice, operations without an end (still
// pending in a dump) as instant events at their enqueue time, and every
// detected fault as a global instant event plus an instant on each suspect
// rank, carrying the summary, suspects and victims in args.
//
// Times are µs from the earliest record of the job (each rank's own clock as
// recorded; see imported_job.h). Slices on one track never overlap: a slice
// that starts before the previous one ended is clipped to start at that end.
#ifndef PITSTOP_IMPORTERS_TIMELINE_H_
#define PITSTOP_IMPORTERS_TIMELINE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pitstop/v1/controller.pb.h"
#include "src/importers/imported_job.h"

namespace pitstop::importers {

nlohmann::json BuildTimeline(const ImportedJob& job,
                             const std::vector<v1::Fault>& faults);

// Writes BuildTimeline() to `path`. InvalidArgument naming the path when it
// cannot be written.
absl::Status WriteTimeline(const ImportedJob& job,
                           const std::vector<v1::Fault>& faults,
                           const std::string& path);

// Checks `doc` against the trace-event format rules Perfetto's JSON importer
// and chrome://tracing rely on (object with a traceEvents array; each event
// has a string name, a known ph, integer pid/tid, numeric ts >= 0; X events
// a dur >= 0 and no partial overlap on one track; M events args.name).
// Returns the first violation, naming the event index.
absl::Status ValidateTraceEvents(const nlohmann::json& doc);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_TIMELINE_H_
