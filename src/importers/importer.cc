#include "src/importers/importer.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "pitstop/status_macros.h"
#include "src/importers/flight_recorder_reader.h"
#include "src/importers/import_util.h"
#include "src/importers/input_file.h"
#include "src/importers/inspector_reader.h"
#include "src/importers/kineto_reader.h"
#include "src/importers/nccl_log_reader.h"
#include "src/importers/pickle_decoder.h"

namespace pitstop::importers {
namespace {

const char* FormatName(FileFormat f) {
  switch (f) {
    case FileFormat::kFlightRecorder:
      return "Flight Recorder";
    case FileFormat::kKineto:
      return "Kineto trace";
    case FileFormat::kInspector:
      return "NCCL Inspector log";
    default:
      return "unknown";
  }
}

struct Input {
  std::string path;
  bool explicit_file;
};

absl::Status Expand(const std::vector<std::string>& paths,
                    std::vector<Input>* out) {
  for (const std::string& p : paths) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrCat(p, ": no such file or directory"));
    }
    if (!S_ISDIR(st.st_mode)) {
      out->push_back({p, true});
      continue;
    }
    DIR* dir = opendir(p.c_str());
    if (dir == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ": cannot read directory"));
    }
    std::vector<std::string> names;
    while (struct dirent* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name.empty() || name[0] == '.') continue;
      std::string full = absl::StrCat(absl::StripSuffix(p, "/"), "/", name);
      struct stat fst;
      if (stat(full.c_str(), &fst) == 0 && S_ISREG(fst.st_mode)) {
        names.push_back(full);
      }
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    for (std::string& n : names) out->push_back({std::move(n), false});
  }
  return absl::OkStatus();
}

// First bytes of a file after decompression ("" for an empty file).
absl::StatusOr<std::string> Head(const std::string& path) {
  ASSIGN_OR_RETURN(auto in, InputStream::Open(path));
  std::string head(4096, '\0');
  in->stream().read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in->stream().gcount()));
  if (head.size() < 4096 && !in->status().ok()) return in->status();
  return head;
}

// The inputs sorted by kind: files of one format, NCCL logs, and files of
// no known format (skipped).
struct Sorted {
  FileFormat format = FileFormat::kUnknown;
  std::vector<std::string> files;
  std::vector<std::string> logs;
  std::vector<std::string> skipped;
};

absl::StatusOr<ImportedJob> ReadFlightRecorder(
    const std::vector<std::string>& files, const ImportOptions& options) {
  std::vector<FlightRecorderDump> dumps;
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(std::string bytes, ReadInputFile(f, options.limits));
    ASSIGN_OR_RETURN(FlightRecorderDump d, ParseFlightRecorderDump(bytes, f));
    dumps.push_back(std::move(d));
  }
  FrJobOptions o;
  o.job_id = options.job_id;
  o.ranks_per_node = options.ranks_per_node;
  return BuildFlightRecorderJob(std::move(dumps), o);
}

absl::StatusOr<ImportedJob> ReadKineto(const std::vector<std::string>& files,
                                       const ImportOptions& options) {
  std::vector<KinetoTrace> traces;
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(auto in, InputStream::Open(f, options.limits));
    std::function<void(uint64_t, uint64_t)> progress;
    if (options.progress) {
      progress = [&](uint64_t done, uint64_t total) {
        options.progress(absl::StrCat("reading ", f, ": ", done >> 20, "/",
                                      total >> 20, " MiB"));
      };
    }
    ASSIGN_OR_RETURN(KinetoTrace t, ParseKinetoTrace(in.get(), f, progress));
    traces.push_back(std::move(t));
  }
  KinetoJobOptions o;
  o.job_id = options.job_id;
  o.ranks_per_node = options.ranks_per_node;
  o.match_tolerance_us = options.kineto_match_tolerance_us;
  return BuildKinetoJob(std::move(traces), o);
}

absl::StatusOr<ImportedJob> ReadInspector(const std::vector<std::string>& files,
                                          const ImportOptions& options) {
  std::vector<InspectorFile> logs;
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(auto in, InputStream::Open(f, options.limits));
    ASSIGN_OR_RETURN(InspectorFile l, ParseInspectorFile(in.get(), f));
    logs.push_back(std::move(l));
  }
  InspectorJobOptions o;
  o.job_id = options.job_id;
  return BuildInspectorJob(std::move(logs), o);
}

// A job of NCCL logs alone: their failed communicator creations.
ImportedJob NcclLogsOnly(const std::vector<NcclLog>& nccl_logs,
                         const ImportOptions& options) {
  ImportedJob job;
  job.format = "nccl-log";
  job.job_id = options.job_id.empty() ? "imported" : options.job_id;
  if (AddNcclLogFailures(nccl_logs, &job) == 0) {
    job.notes.push_back(
        absl::StrCat("read ", nccl_logs.size(),
                     " NCCL log(s): no failed communicator creation in them"));
  }
  return job;
}

// After reading: ranks without a file modelled (refused beyond
// kMaxAbsentRanks), the NCCL logs' failures, the skipped files noted.
absl::Status Complete(const Sorted& sorted,
                      const std::vector<NcclLog>& nccl_logs,
                      const ImportOptions& options, ImportedJob* job) {
  // Every rank without a file is modelled (memberships + goodbye) and the
  // detection engine's state grows with members x such ranks: refuse
  // clearly instead of running out of memory.
  if (job->missing_ranks.size() > kMaxAbsentRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        job->missing_ranks.size(),
        " ranks named by the input's groups have no file (world size ",
        job->world_size, "); at most ", kMaxAbsentRanks,
        " can be modelled: add the files of more ranks, or check the groups' "
        "rank lists (warnings: ",
        job->warnings.empty() ? "none" : job->warnings.front(), ")"));
  }
  const FileFormat format = sorted.format;
  std::string prefix = format == FileFormat::kFlightRecorder ? "fr-"
                       : format == FileFormat::kKineto       ? "kineto-"
                                                             : "inspector-";
  int32_t per_node = options.ranks_per_node;
  AddAbsentRanks(job,
                 [&](int32_t g) { return SyntheticHost(prefix, g, per_node); });
  if (!nccl_logs.empty()) AddNcclLogFailures(nccl_logs, job);
  if (!sorted.skipped.empty()) {
    job->notes.push_back(absl::StrCat("skipped ", sorted.skipped.size(),
                                      " file(s) of no known format (e.g. ",
                                      sorted.skipped[0], ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Sorted> SortInputs(const std::vector<Input>& inputs) {
  Sorted out;
  for (const Input& in : inputs) {
    auto head = Head(in.path);
    // A damaged file in a job directory is fatal too.
    if (!head.ok()) return head.status();
    if (head->empty()) {
      if (in.explicit_file || out.format != FileFormat::kUnknown ||
          absl::StrContains(in.path, "dump") ||
          absl::StrContains(in.path, "trace")) {
        return absl::InvalidArgumentError(
            absl::StrCat(in.path, ": empty file"));
      }
      out.skipped.push_back(in.path);
      continue;
    }
    FileFormat f = DetectFormat(*head);
    if (f == FileFormat::kUnknown && LooksLikeNcclLog(*head)) {
      out.logs.push_back(in.path);
      continue;
    }
    if (f == FileFormat::kUnknown) {
      if (in.explicit_file) {
        return absl::InvalidArgumentError(absl::StrCat(
            in.path,
            ": not a recognised format (expected a Flight Recorder dump, a "
            "Kineto/Chrome trace or an NCCL Inspector log)"));
      }
      out.skipped.push_back(in.path);
      continue;
    }
    if (out.format != FileFormat::kUnknown && f != out.format) {
      return absl::InvalidArgumentError(absl::StrCat(
          in.path, ": is a ", FormatName(f), " but earlier files are ",
          FormatName(out.format), "; analyse one kind of file at a time"));
    }
    out.format = f;
    out.files.push_back(in.path);
  }
  return out;
}

}  // namespace

FileFormat DetectFormat(absl::string_view head) {
  if (LooksLikePickle(head)) return FileFormat::kFlightRecorder;
  absl::string_view s = absl::StripLeadingAsciiWhitespace(head);
  if (!absl::StartsWith(s, "{")) return FileFormat::kUnknown;
  if (LooksLikeKineto(head)) return FileFormat::kKineto;
  if (LooksLikeInspector(head)) return FileFormat::kInspector;
  if (LooksLikeFlightRecorder(head)) return FileFormat::kFlightRecorder;
  return FileFormat::kUnknown;
}

absl::StatusOr<ImportedJob> ImportPaths(const std::vector<std::string>& paths,
                                        const ImportOptions& options) {
  if (paths.empty()) return absl::InvalidArgumentError("no input paths given");
  std::vector<Input> inputs;
  RETURN_IF_ERROR(Expand(paths, &inputs));
  ASSIGN_OR_RETURN(const Sorted sorted, SortInputs(inputs));
  // NCCL logs beside the other files (or alone): read for failed
  // communicator creation (nccl_log_reader.h).
  std::vector<NcclLog> nccl_logs;
  for (const std::string& f : sorted.logs) {
    ASSIGN_OR_RETURN(auto in, InputStream::Open(f, options.limits));
    ASSIGN_OR_RETURN(NcclLog l, ParseNcclLog(&in->stream(), f));
    RETURN_IF_ERROR(in->status());  // a decompression cap ends the stream
    nccl_logs.push_back(std::move(l));
  }
  if (sorted.files.empty() && !nccl_logs.empty()) {
    return NcclLogsOnly(nccl_logs, options);
  }
  if (sorted.files.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no Flight Recorder, Kineto or Inspector files found in the given "
        "path(s)",
        sorted.skipped.empty() ? ""
                               : absl::StrCat(" (", sorted.skipped.size(),
                                              " other files skipped)")));
  }
  absl::StatusOr<ImportedJob> job =
      sorted.format == FileFormat::kFlightRecorder
          ? ReadFlightRecorder(sorted.files, options)
      : sorted.format == FileFormat::kKineto
          ? ReadKineto(sorted.files, options)
          : ReadInspector(sorted.files, options);
  if (!job.ok()) return job;
  RETURN_IF_ERROR(Complete(sorted, nccl_logs, options, &*job));
  return job;
}

}  // namespace pitstop::importers
