// pitstop-agent: the node agent. See docs/agent.md.
#include <malloc.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "pitstop/config.h"
#include "pitstop/logging.h"
#include "pitstop/signals.h"
#include "src/agent/agent.h"
#include "src/agent/agent_options.h"

namespace {

// sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET.
void Notify(const char* state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path)) return;
  std::memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract socket
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sendto(fd, state, std::strlen(state), MSG_NOSIGNAL,
         reinterpret_cast<sockaddr*>(&addr),
         static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  // absl::Mutex's cycle detection costs a graph lookup per lock on the
  // ingest path; lock order is documented in agent_core.h instead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // gRPC's many threads would each get a glibc malloc arena; a few arenas
  // keep steady-state RSS low (docs/benchmarks.md).
  mallopt(M_ARENA_MAX, 2);
  pitstop::agent::AgentOptions options;
  pitstop::ConfigSchema schema(
      "pitstop-agent",
      "pitstop node agent: receives the telemetry streams of the local "
      "training processes on a Unix socket, joins them into per-collective "
      "summaries, sends them to pitstop-controller and serves Prometheus "
      "metrics. Every YAML key of --config has a flag (ingest.socket -> "
      "--ingest-socket); flags win.");
  pitstop::agent::RegisterAgentOptions(&schema, &options);
  auto parsed = schema.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "pitstop-agent: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (*parsed == pitstop::ConfigParse::kExit) return 0;
  if (auto st =
          pitstop::agent::ValidateAgentOptions(options, schema.config_path());
      !st.ok()) {
    std::fprintf(stderr, "pitstop-agent: %s\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  pitstop::LoggingOptions log;
  log.level = options.log_level;
  log.file = options.log_file;
  log.program = "pitstop-agent";
  if (auto st = pitstop::SetupLogging(log); !st.ok()) {
    std::fprintf(stderr, "pitstop-agent: %s\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  auto signals = pitstop::ShutdownSignals::Create();
  if (!signals.ok()) {
    std::fprintf(stderr, "pitstop-agent: %s\n",
                 signals.status().ToString().c_str());
    return 1;
  }
  auto agent = pitstop::agent::Agent::Create(options, pitstop::Clock::Real());
  if (!agent.ok()) {
    std::fprintf(stderr, "pitstop-agent: %s\n",
                 std::string(agent.status().message()).c_str());
    // Bad option values (socket path, unknown group) are usage errors.
    const absl::StatusCode code = agent.status().code();
    return code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kNotFound
               ? 2
               : 1;
  }
  auto logger = pitstop::Logger("agent");
  logger->info("ready: host {} socket {} controller '{}' metrics port {}",
               (*agent)->host(), options.ingest_socket, options.controller,
               (*agent)->metrics_port());
  // metrics_port stays last: scripts read it up to the end of the line.
  std::printf("pitstop-agent ready socket=%s shm_socket=%s metrics_port=%d\n",
              options.ingest_socket.c_str(),
              pitstop::agent::EffectiveShmSocket(options).c_str(),
              (*agent)->metrics_port());
  std::fflush(stdout);
  Notify("READY=1");
  int sig = 0;
  while ((sig = (*signals)->Wait(absl::Seconds(1))) == 0) {
    // A refused registration is a configuration error: exit 2 (usage), as
    // for a bad flag, rather than retry forever.
    const pitstop::agent::UpstreamClient* up = (*agent)->upstream();
    if (absl::Status st = up != nullptr ? up->refused() : absl::OkStatus();
        !st.ok()) {
      std::fprintf(stderr, "pitstop-agent: %s\n",
                   std::string(st.message()).c_str());
      Notify("STOPPING=1");
      (*agent)->Stop();
      return 2;
    }
  }
  logger->info("signal {}: shutting down", sig);
  Notify("STOPPING=1");
  (*agent)->Stop();
  agent->reset();
  logger->info("stopped");
  return 0;
}
