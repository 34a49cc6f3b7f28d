#include "src/agent/joiner_config.h"

#include <yaml-cpp/yaml.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/bounded_file.h"

namespace pitstop::agent {
namespace {

using Launchers = std::map<std::string, std::unique_ptr<JoinerLauncher>>;

std::string At(const std::string& source, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return absl::StrCat(source, ":", m.line + 1, ":", m.column + 1);
}

absl::Status Bad(const std::string& source, const YAML::Node& n,
                 const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(At(source, n), ": ", why));
}

// One job's entry into `c`.
absl::Status ReadEntry(const std::string& source, const YAML::Node& entry,
                       JoinerLaunchConfig* c) {
  const std::string job = absl::StrCat("jobs.", c->job_id);
  if (!entry.IsMap()) return Bad(source, entry, job + ": expected a mapping");
  for (const auto& kv : entry) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string what = absl::StrCat("key '", job, ".", key, "'");
    if (key == "command") {
      if (!v.IsSequence()) return Bad(source, v, what + ": expected a list");
      for (const auto& a : v) c->command.push_back(a.as<std::string>());
    } else if (key == "env") {
      if (!v.IsMap()) return Bad(source, v, what + ": expected a mapping");
      for (const auto& e : v) {
        c->env[e.first.as<std::string>()] = e.second.as<std::string>();
      }
    } else if (key == "start_grace_ms") {
      int64_t ms = -1;
      try {
        ms = v.as<int64_t>();
      } catch (const YAML::Exception&) {
      }
      if (ms < 0 || ms > 60000) {
        return Bad(source, v, what + ": expected milliseconds in [0, 60000]");
      }
      c->start_grace = absl::Milliseconds(ms);
    } else if (!v.IsScalar()) {
      return Bad(source, v, what + ": expected a string");
    } else if (key == "launcher") {
      c->launcher = v.as<std::string>();
    } else if (key == "user") {
      c->user = v.as<std::string>();
    } else if (key == "work_dir") {
      c->work_dir = v.as<std::string>();
    } else if (key == "log_dir") {
      c->log_dir = v.as<std::string>();
    } else {
      return Bad(source, kv.first,
                 absl::StrCat("unknown ", what,
                              " (expected launcher, user, command, env, "
                              "work_dir, log_dir, start_grace_ms)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Launchers> Parse(const std::string& source,
                                const YAML::Node& root, Clock* clock) {
  Launchers out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) return Bad(source, root, "expected a mapping with 'jobs'");
  for (const auto& top : root) {
    if (top.first.as<std::string>() != "jobs") {
      return Bad(source, top.first,
                 absl::StrCat("unknown key '", top.first.as<std::string>(),
                              "' (expected jobs)"));
    }
    if (!top.second.IsMap()) {
      return Bad(source, top.second, "jobs: expected a mapping by job id");
    }
    for (const auto& job : top.second) {
      JoinerLaunchConfig c;
      c.job_id = job.first.as<std::string>();
      if (absl::Status s = ReadEntry(source, job.second, &c); !s.ok()) return s;
      absl::StatusOr<std::unique_ptr<JoinerLauncher>> l =
          JoinerLauncher::Create(std::move(c), clock);
      if (!l.ok()) {
        return Bad(source, job.first, std::string(l.status().message()));
      }
      out[job.first.as<std::string>()] = std::move(*l);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Launchers> ParseJoinerLaunchers(const std::string& text,
                                               const std::string& source,
                                               Clock* clock) {
  try {
    return Parse(source, YAML::Load(text), clock);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
}

absl::StatusOr<Launchers> LoadJoinerLaunchers(const std::string& path,
                                              Clock* clock) {
  absl::StatusOr<std::string> text = ReadRegularFile(
      path, "migration.joiners_file (--migration-joiners-file)");
  if (!text.ok()) return text.status();
  return ParseJoinerLaunchers(*text, path, clock);
}

}  // namespace pitstop::agent
