// What `pitstop plan` writes: the report as a table or JSON, and the plan
// itself for --plan-out (docs/planning.md).
#ifndef PITSTOP_TOOLS_PITSTOP_PLAN_REPORT_H_
#define PITSTOP_TOOLS_PITSTOP_PLAN_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "src/c4p/evaluate.h"
#include "src/c4p/fabric.h"
#include "src/c4p/qps_auto.h"

namespace pitstop::tool {

// The report as `-o json` prints it (without "qps": QpsJson).
nlohmann::json ReportJson(const c4p::EvalReport& r);
// How the QPs per connection were chosen.
nlohmann::json QpsJson(const c4p::QpsChoice& c);
// The report as the default table, on stdout.
void PrintTable(const c4p::EvalReport& r, const c4p::QpsChoice& qps);

// The plan's network flows with their NICs, UDP source ports and paths,
// as JSON at `path`. Internal when a flow has no planned NIC pair (a bug:
// Evaluate refuses such a job); InvalidArgument naming the reason when
// the file cannot be written (ReplaceFile, plan_out.h).
absl::Status WritePlan(const c4p::Fabric& fabric, const c4p::EvalReport& r,
                       const std::string& path);

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_PLAN_REPORT_H_
