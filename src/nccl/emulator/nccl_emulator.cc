#include "src/nccl/emulator/nccl_emulator.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "plugin/abi/profiler_common.h"
#include "plugin/abi/profiler_v3.h"
#include "plugin/abi/profiler_v4.h"
#include "plugin/abi/profiler_v5.h"
#include "plugin/abi/profiler_v6.h"
#include "src/nccl/emulator/emulator_loader.h"

namespace pitstop::emu {
namespace {

namespace abi = ::pitstop::abi;

// NCCL passes static string literals; ours must live as long.
const char* Intern(const std::string& s) {
  static std::mutex mu;
  static auto* strings = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return strings->insert(s).first->c_str();
}

// A thread that runs closures in order; Run() waits for completion.
class Worker {
 public:
  Worker() : thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Run(const std::function<void()>& fn) {
    bool done = false;
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back([&] {
      fn();
      std::lock_guard<std::mutex> l(mu_);
      done = true;
      done_cv_.notify_all();
    });
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return done; });
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// NCCL 2.28 emission rules: a type is emitted if the mask has it or any of
// its descendants (nccl-plugin-abi.md sec. 8).
uint32_t Implied(uint32_t type) {
  const uint32_t below_op =
      abi::kProxyOp | abi::kProxyStep | abi::kKernelCh | abi::kNetPlugin;
  switch (type) {
    case abi::kGroupApi:
      return abi::kGroupApi | abi::kCollApi | abi::kP2pApi |
             abi::kKernelLaunch | abi::kGroup | abi::kColl | abi::kP2p |
             below_op;
    case abi::kCollApi:
      return abi::kCollApi | abi::kColl | below_op;
    case abi::kP2pApi:
      return abi::kP2pApi | abi::kP2p | below_op;
    case abi::kGroup:
      return abi::kGroup | abi::kColl | abi::kP2p | below_op;
    case abi::kColl:
      return abi::kColl | below_op;
    case abi::kP2p:
      return abi::kP2p | below_op;
    case abi::kProxyOp:
      return abi::kProxyOp | abi::kProxyStep | abi::kNetPlugin;
    case abi::kProxyStep:
      return abi::kProxyStep | abi::kNetPlugin;
    default:
      return type;
  }
}

// Version-independent event description the harness fills.
struct Ev {
  uint32_t type = 0;
  void* parent = nullptr;
  int rank = 0;
  // coll / p2p / api
  uint64_t seq = 0;
  const char* func = nullptr;
  size_t count = 0;
  int root = -1;
  int peer = -1;
  const char* datatype = nullptr;
  uint8_t n_channels = 0;
  uint8_t n_warps = 0;
  const char* algo = nullptr;
  const char* proto = nullptr;
  void* parent_group = nullptr;
  bool graph_captured = false;
  uint64_t comm_hash = 0;      // v3
  const char* name = nullptr;  // v3
  // proxy op
  pid_t pid = 0;
  int is_send = 0;
  int n_steps = 0;
  int chunk = 0;
  int step = 0;
  uint64_t p_timer = 0;
  int64_t net_id = 0;
  void* net_data = nullptr;
};

template <typename D>
void FillV4Plus(const Ev& e, D* d) {
  switch (e.type) {
    case abi::kColl:
      d->coll.seq_number = e.seq;
      d->coll.func = e.func;
      d->coll.count = e.count;
      d->coll.root = e.root;
      d->coll.datatype = e.datatype;
      d->coll.n_channels = e.n_channels;
      d->coll.n_warps = e.n_warps;
      d->coll.algo = e.algo;
      d->coll.proto = e.proto;
      break;
    case abi::kP2p:
      d->p2p.func = e.func;
      d->p2p.datatype = e.datatype;
      d->p2p.count = e.count;
      d->p2p.peer = e.peer;
      d->p2p.n_channels = e.n_channels;
      break;
    case abi::kProxyOp:
      d->proxy_op.pid = e.pid;
      d->proxy_op.channel_id = e.n_channels;
      d->proxy_op.peer = e.peer;
      d->proxy_op.n_steps = e.n_steps;
      d->proxy_op.chunk_size = e.chunk;
      d->proxy_op.is_send = e.is_send;
      break;
    case abi::kProxyStep:
      d->proxy_step.step = e.step;
      break;
    case abi::kKernelCh:
      d->kernel_ch.channel_id = e.n_channels;
      d->kernel_ch.p_timer = e.p_timer;
      break;
    case abi::kNetPlugin:
      d->net_plugin.id = e.net_id;
      d->net_plugin.data = e.net_data;
      break;
    default:
      break;
  }
}

template <typename D>
void FillV5Plus(const Ev& e, D* d) {
  FillV4Plus(e, d);
  switch (e.type) {
    case abi::kGroupApi:
      d->group_api.graph_captured = e.graph_captured;
      d->group_api.group_depth = 1;
      break;
    case abi::kCollApi:
      d->coll_api.func = e.func;
      d->coll_api.count = e.count;
      d->coll_api.datatype = e.datatype;
      d->coll_api.root = e.root;
      d->coll_api.graph_captured = e.graph_captured;
      break;
    case abi::kP2pApi:
      d->p2p_api.func = e.func;
      d->p2p_api.count = e.count;
      d->p2p_api.datatype = e.datatype;
      d->p2p_api.graph_captured = e.graph_captured;
      break;
    case abi::kColl:
      d->coll.parent_group = e.parent_group;
      break;
    case abi::kP2p:
      d->p2p.parent_group = e.parent_group;
      break;
    default:
      break;
  }
}

// Stands in for ncclDebugLog: prints what the plugin logs.
void EmulatedNcclLog(abi::NcclLogLevel level, unsigned long /*flags*/,
                     const char* /*file*/, int /*line*/, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PrintNcclLogLine(level, fmt, ap);
  va_end(ap);
}

}  // namespace

struct Emulator::Impl {
  void* lib = nullptr;
  std::string path;
  int version = 0;
  void* table = nullptr;
  int mask = 0;  // NCCL's process-global activation mask
  pid_t pid = getpid();
  Worker proxy;
  Worker graph;

  int LoadMask() const { return __atomic_load_n(&mask, __ATOMIC_RELAXED); }

  void* Start(void* ctx, const Ev& e) {
    void* h = nullptr;
    switch (version) {
      case 6: {
        abi::DescrV6 d;
        std::memset(&d, 0, sizeof(d));
        d.type = e.type, d.parent_obj = e.parent, d.rank = e.rank;
        FillV5Plus(e, &d);
        static_cast<abi::ProfilerV6*>(table)->start_event(ctx, &h, &d);
        break;
      }
      case 5: {
        abi::DescrV5 d;
        std::memset(&d, 0, sizeof(d));
        d.type = e.type, d.parent_obj = e.parent, d.rank = e.rank;
        FillV5Plus(e, &d);
        static_cast<abi::ProfilerV5*>(table)->start_event(ctx, &h, &d);
        break;
      }
      case 4: {
        if (e.type > abi::kNetPlugin) return nullptr;  // not in v4
        abi::DescrV4 d;
        std::memset(&d, 0, sizeof(d));
        d.type = static_cast<uint8_t>(e.type), d.parent_obj = e.parent;
        d.rank = e.rank;
        FillV4Plus(e, &d);
        static_cast<abi::ProfilerV4*>(table)->start_event(ctx, &h, &d);
        break;
      }
      case 3: {
        if (e.type > abi::kNetPlugin) return nullptr;
        abi::DescrV3 d;
        std::memset(&d, 0, sizeof(d));
        d.type = static_cast<uint8_t>(e.type), d.parent_obj = e.parent;
        d.rank = e.rank;
        switch (e.type) {
          case abi::kColl:
            d.coll.name = e.name;
            d.coll.comm_hash = e.comm_hash;
            d.coll.seq_number = e.seq;
            d.coll.func = e.func;
            d.coll.count = e.count;
            d.coll.root = e.root;
            d.coll.datatype = e.datatype;
            d.coll.n_max_channels = e.n_channels;
            d.coll.n_warps = e.n_warps;
            d.coll.algo = e.algo;
            d.coll.proto = e.proto;
            break;
          case abi::kP2p:
            d.p2p.name = e.name;
            d.p2p.comm_hash = e.comm_hash;
            d.p2p.func = e.func;
            d.p2p.datatype = e.datatype;
            d.p2p.count = e.count;
            d.p2p.peer = e.peer;
            break;
          case abi::kProxyOp:
            d.proxy_op.pid = e.pid;
            d.proxy_op.channel_id = e.n_channels;
            d.proxy_op.peer = e.peer;
            d.proxy_op.n_steps = e.n_steps;
            d.proxy_op.chunk_size = e.chunk;
            d.proxy_op.is_send = e.is_send;
            break;
          case abi::kProxyStep:
            d.proxy_step.step = e.step;
            break;
          case abi::kKernelCh:
            d.kernel_ch.channel_id = e.n_channels;
            break;
          case abi::kNetPlugin:
            d.net_plugin.id = e.net_id;
            d.net_plugin.data = e.net_data;
            break;
          default:
            break;
        }
        static_cast<abi::ProfilerV3*>(table)->start_event(ctx, &h, &d);
        break;
      }
    }
    return h;
  }
  void Stop(void* h) {
    // stop_event has the same signature in every version.
    static_cast<abi::ProfilerV5*>(table)->stop_event(h);
  }
  void Record(void* h, int state, uint64_t arg) {
    if (version == 3) {
      abi::StateArgsV3 a;
      std::memset(&a, 0, sizeof(a));
      a.proxy_op.trans_size = arg;
      static_cast<abi::ProfilerV3*>(table)->record_event_state(h, state, &a);
    } else {
      abi::StateArgsV4 a;
      a.kernel_ch.p_timer = arg;
      static_cast<abi::ProfilerV5*>(table)->record_event_state(h, state, &a);
    }
  }
  int Init(void** ctx, const CommSpec& s) {
    const char* name = s.name.empty() ? nullptr : Intern(s.name);
    abi::NcclLogger logger = &EmulatedNcclLog;
    switch (version) {
      case 6:
        return static_cast<abi::ProfilerV6*>(table)->init(
            ctx, s.comm_hash, &mask, name, s.n_nodes, s.n_ranks, s.rank,
            logger);
      case 5:
        return static_cast<abi::ProfilerV5*>(table)->init(
            ctx, s.comm_hash, &mask, name, s.n_nodes, s.n_ranks, s.rank,
            logger);
      case 4:
        return static_cast<abi::ProfilerV4*>(table)->init(
            ctx, &mask, name, s.comm_hash, s.n_nodes, s.n_ranks, s.rank,
            logger);
      default:
        return static_cast<abi::ProfilerV3*>(table)->init(ctx, &mask);
    }
  }
  int Finalize(void* ctx) {
    return static_cast<abi::ProfilerV5*>(table)->finalize(ctx);
  }
};

struct Comm::State {
  Emulator::Impl* impl;
  CommSpec spec;
  void* ctx = nullptr;
  bool finalized = false;
  std::mutex mu;
};

struct Op::State {
  Emulator::Impl* impl;
  Comm::State* comm;
  OpSpec spec;
  const char* func;
  const char* datatype;
  const char* algo;
  const char* proto;
  uint32_t mask;  // sampled at the API call
  bool replay = false;
  void* coll_api = nullptr;
  void* coll = nullptr;
  bool enqueued = false;
  struct Proxy {
    void* handle;
    bool is_send;
  };
  std::vector<Proxy> proxies;
  std::map<int, void*> kernels;
  std::mutex mu;

  bool Emits(uint32_t type) const { return (mask & Implied(type)) != 0; }
  Ev Base(uint32_t type, void* parent) const {
    Ev e;
    e.type = type;
    e.parent = parent;
    e.func = func;
    e.count = spec.count;
    e.datatype = datatype;
    e.root = spec.root;
    e.peer = spec.peer;
    e.graph_captured = spec.graph_captured;
    return e;
  }
};

std::string BuiltPluginPath() { return PITSTOP_PLUGIN_PATH; }

namespace {
void* OpenByName(const std::string& name, std::string* err) {
  return DlopenByName(name, BuiltPluginPath(), err);
}
}  // namespace

absl::StatusOr<void*> OpenPluginLibrary(const std::string& value) {
  std::vector<std::string> tried;
  const std::string first = value.empty() ? "libnccl-profiler.so" : value;
  tried.push_back(first);
  std::string err;
  void* h = OpenByName(first, &err);
  const bool looks_like_lib = value.rfind("lib", 0) == 0 && value.size() > 3 &&
                              value.compare(value.size() - 3, 3, ".so") == 0;
  if (h == nullptr && !value.empty() && value.find('/') == std::string::npos &&
      !looks_like_lib) {
    const std::string second = "libnccl-profiler-" + value + ".so";
    tried.push_back(second);
    h = OpenByName(second, &err);
  }
  if (h == nullptr) {
    return absl::NotFoundError(absl::StrCat("profiler plugin not found; tried ",
                                            absl::StrJoin(tried, ", "), ": ",
                                            err));
  }
  return h;
}

absl::StatusOr<std::unique_ptr<Emulator>> Emulator::Create(
    const LoadOptions& options) {
  std::string value = options.plugin;
  if (value.empty()) {
    const char* env = std::getenv("NCCL_PROFILER_PLUGIN");
    value = (env != nullptr && env[0] != '\0') ? env : BuiltPluginPath();
  }
  if (options.force_version != 0 &&
      (options.force_version < 3 || options.force_version > 6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("force_version ", options.force_version, " not in 3..6"));
  }
  auto lib = OpenPluginLibrary(value);
  if (!lib.ok()) return lib.status();
  auto impl = std::make_unique<Impl>();
  impl->lib = *lib;
  for (int v = 6; v >= 3; --v) {
    if (options.force_version != 0 && v != options.force_version) continue;
    void* sym = dlsym(impl->lib, absl::StrCat("ncclProfiler_v", v).c_str());
    if (sym != nullptr) {
      impl->version = v;
      impl->table = sym;
      break;
    }
  }
  if (impl->table == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        value, ": no ncclProfiler_v",
        options.force_version != 0 ? absl::StrCat(options.force_version)
                                   : "6..v3"));
  }
  Dl_info info{};
  impl->path = dladdr(impl->table, &info) != 0 && info.dli_fname != nullptr
                   ? info.dli_fname
                   : value;
  return std::unique_ptr<Emulator>(new Emulator(std::move(impl)));
}

Emulator::Emulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Emulator::~Emulator() = default;
int Emulator::abi_version() const { return impl_->version; }
const std::string& Emulator::library_path() const { return impl_->path; }
int Emulator::activation_mask() const { return impl_->LoadMask(); }
void Emulator::RawStop(void* handle) { impl_->Stop(handle); }
void Emulator::RawRecordState(void* handle, int state, uint64_t arg) {
  impl_->Record(handle, state, arg);
}

std::unique_ptr<Comm> Emulator::InitCommKeepOnFailure(const CommSpec& spec,
                                                      int* init_result) {
  auto state = std::make_unique<Comm::State>();
  state->impl = impl_.get();
  state->spec = spec;
  const int r = impl_->Init(&state->ctx, spec);
  if (init_result != nullptr) *init_result = r;
  return std::unique_ptr<Comm>(new Comm(std::move(state)));
}

absl::StatusOr<std::unique_ptr<Comm>> Emulator::InitComm(const CommSpec& spec) {
  int r = 0;
  auto comm = InitCommKeepOnFailure(spec, &r);
  if (r != 0) {
    comm->state_->finalized = true;  // NCCL skips finalize of a failed init
    return absl::FailedPreconditionError(
        absl::StrCat("profiler init failed with ncclResult ", r,
                     "; NCCL would continue without profiler"));
  }
  return comm;
}

Comm::Comm(std::unique_ptr<State> state) : state_(std::move(state)) {}
Comm::~Comm() { Finalize(); }
void* Comm::context() const { return state_->ctx; }
const CommSpec& Comm::spec() const { return state_->spec; }

int Comm::Finalize() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->finalized) return 0;
  state_->finalized = true;
  if (state_->ctx == nullptr) return 0;  // NCCL only finalizes a context
  return state_->impl->Finalize(state_->ctx);
}

std::unique_ptr<Op> Comm::StartOp(const OpSpec& spec) {
  Emulator::Impl* impl = state_->impl;
  auto s = std::make_unique<Op::State>();
  s->impl = impl;
  s->comm = state_.get();
  s->spec = spec;
  s->func = Intern(spec.func);
  s->datatype = Intern(spec.datatype);
  s->algo = Intern(spec.algo);
  s->proto = Intern(spec.proto);
  s->mask = static_cast<uint32_t>(impl->LoadMask());
  void* ctx = state_->ctx;
  if (impl->version >= 5) {
    void* group_api = nullptr;
    if (s->Emits(abi::kGroupApi)) {
      Ev g = s->Base(abi::kGroupApi, nullptr);
      group_api = impl->Start(ctx, g);
      if (group_api) impl->Record(group_api, abi::kGroupStartApiStop, 0);
    }
    const uint32_t api = spec.p2p ? abi::kP2pApi : abi::kCollApi;
    if (s->Emits(api)) {
      s->coll_api = impl->Start(ctx, s->Base(api, group_api));
      if (s->coll_api) impl->Stop(s->coll_api);  // before the API returns
    }
    if (group_api) impl->Record(group_api, abi::kGroupEndApiStart, 0);
    if (s->Emits(abi::kKernelLaunch)) {
      void* kl = impl->Start(ctx, s->Base(abi::kKernelLaunch, group_api));
      if (kl) impl->Stop(kl);
    }
    if (group_api) impl->Stop(group_api);
  }
  return std::unique_ptr<Op>(new Op(std::move(s)));
}

std::unique_ptr<Op> Comm::Replay(const Op& captured, uint64_t seq_number) {
  const Op::State& c = *captured.state_;
  auto s = std::make_unique<Op::State>();
  s->impl = c.impl;
  s->comm = state_.get();
  s->spec = c.spec;
  s->spec.seq_number = seq_number;
  s->spec.graph_captured = true;
  s->func = c.func;
  s->datatype = c.datatype;
  s->algo = c.algo;
  s->proto = c.proto;
  s->mask = static_cast<uint32_t>(c.impl->LoadMask());
  s->replay = true;
  s->coll_api = c.coll_api;  // stopped at capture time
  return std::unique_ptr<Op>(new Op(std::move(s)));
}

void Comm::RunCollective(const OpSpec& spec, const Timeline& t) {
  auto op = StartOp(spec);
  if (t.api_to_enqueue_us > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(t.api_to_enqueue_us));
  }
  op->EnqueueDone();
  const int n = state_->spec.n_ranks > 0 ? state_->spec.n_ranks : 1;
  const int rank = state_->spec.rank;
  std::vector<int> proxies;
  for (int ch = 0; ch < spec.n_channels; ++ch) {
    if (spec.p2p) {
      proxies.push_back(op->ProxyOpStart({.channel = ch,
                                          .peer = spec.peer,
                                          .is_send = spec.func == "Send",
                                          .n_steps = t.steps_per_proxy_op}));
    } else {
      proxies.push_back(op->ProxyOpStart({.channel = ch,
                                          .peer = (rank + 1) % n,
                                          .is_send = true,
                                          .n_steps = t.steps_per_proxy_op}));
      proxies.push_back(op->ProxyOpStart({.channel = ch,
                                          .peer = (rank + n - 1) % n,
                                          .is_send = false,
                                          .n_steps = t.steps_per_proxy_op}));
    }
    op->KernelStart(ch, t.gpu_start_ns + ch * 100);
  }
  for (int p : proxies) op->ProxyOpInProgress(p);
  for (int s = 0; s < t.steps_per_proxy_op; ++s) {
    for (int p : proxies) op->ProxyStep(p, s, t.step_bytes, t.with_net_events);
  }
  if (t.kernel_us > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(t.kernel_us));
  }
  for (int p : proxies) op->ProxyOpStop(p);
  for (int ch = 0; ch < spec.n_channels; ++ch) {
    op->KernelStop(ch, t.gpu_start_ns + t.gpu_duration_ns + ch * 100);
  }
}

Op::Op(std::unique_ptr<State> state) : state_(std::move(state)) {}
Op::~Op() = default;
void* Op::coll_handle() const { return state_->coll; }
void* Op::api_handle() const { return state_->coll_api; }

void Op::EnqueueDone() {
  State* s = state_.get();
  auto host_task = [s] {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->enqueued) return;
    s->enqueued = true;
    Emulator::Impl* impl = s->impl;
    void* ctx = s->comm->ctx;
    void* group = nullptr;
    if (s->Emits(abi::kGroup))
      group = impl->Start(ctx, s->Base(abi::kGroup, nullptr));
    const uint32_t type = s->spec.p2p ? abi::kP2p : abi::kColl;
    if (s->Emits(type)) {
      Ev e = s->Base(type, impl->version >= 5 ? s->coll_api : group);
      e.rank = s->comm->spec.rank;
      e.seq = s->spec.seq_number;
      e.n_channels = static_cast<uint8_t>(s->spec.n_channels);
      e.n_warps = static_cast<uint8_t>(s->spec.n_warps);
      e.algo = s->algo;
      e.proto = s->proto;
      e.parent_group = group;
      e.comm_hash = s->comm->spec.comm_hash;
      e.name =
          s->comm->spec.name.empty() ? nullptr : Intern(s->comm->spec.name);
      s->coll = impl->Start(ctx, e);
      if (s->coll) impl->Stop(s->coll);  // "enqueued to the proxy"
    }
    if (group) impl->Stop(group);
  };
  if (s->spec.graph_captured || s->replay) {
    s->impl->graph.Run(host_task);  // CUDA-internal thread
  } else {
    host_task();
  }
}

int Op::ProxyOpStart(const ProxyOpSpec& spec) {
  State* s = state_.get();
  int index = -1;
  s->impl->proxy.Run([&] {
    std::lock_guard<std::mutex> lock(s->mu);
    void* h = nullptr;
    if (s->Emits(abi::kProxyOp)) {
      const pid_t pid = spec.pid != 0 ? spec.pid : s->impl->pid;
      // PXN: the parent belongs to another process; hand the plugin an
      // address it must never dereference.
      void* parent =
          pid == s->impl->pid ? s->coll : reinterpret_cast<void*>(0x10);
      Ev e;
      e.type = abi::kProxyOp;
      e.parent = parent;
      e.rank = s->comm->spec.rank;
      e.pid = pid;
      e.n_channels = static_cast<uint8_t>(spec.channel);
      e.peer = spec.peer;
      e.n_steps = spec.n_steps;
      e.chunk = spec.chunk_size;
      e.is_send = spec.is_send ? 1 : 0;
      h = s->impl->Start(s->comm->ctx, e);
    }
    s->proxies.push_back({h, spec.is_send});
    index = static_cast<int>(s->proxies.size()) - 1;
  });
  return index;
}

void Op::ProxyOpInProgress(int proxy) {
  State* s = state_.get();
  s->impl->proxy.Run([&] {
    std::lock_guard<std::mutex> lock(s->mu);
    if (proxy < 0 || proxy >= static_cast<int>(s->proxies.size())) return;
    if (void* h = s->proxies[proxy].handle) {
      s->impl->Record(h, abi::kProxyOpInProgress, 0);
    }
  });
}

void Op::ProxyStep(int proxy, int step, size_t bytes, bool with_net_event) {
  State* s = state_.get();
  s->impl->proxy.Run([&] {
    std::lock_guard<std::mutex> lock(s->mu);
    if (proxy < 0 || proxy >= static_cast<int>(s->proxies.size())) return;
    const auto& p = s->proxies[proxy];
    if (!s->Emits(abi::kProxyStep)) return;
    Emulator::Impl* impl = s->impl;
    Ev e;
    e.type = abi::kProxyStep;
    e.parent = p.handle;
    e.rank = s->comm->spec.rank;
    e.step = step;
    void* h = impl->Start(s->comm->ctx, e);
    if (h == nullptr) return;
    std::vector<int> states =
        p.is_send ? std::vector<int>{abi::kProxyStepSendGpuWait,
                                     abi::kProxyStepSendPeerWait,
                                     abi::kProxyStepSendWait}
                  : std::vector<int>{abi::kProxyStepRecvWait,
                                     abi::kProxyStepRecvFlushWait,
                                     abi::kProxyStepRecvGpuWait};
    for (int st : states) {
      if (impl->version == 3 && st == abi::kProxyStepSendPeerWait) continue;
      impl->Record(h, st, bytes);
      if (with_net_event &&
          (st == abi::kProxyStepSendWait || st == abi::kProxyStepRecvWait) &&
          s->Emits(abi::kNetPlugin)) {
        abi::NetIbEventV1 ib{};
        ib.type = 1;
        ib.qp.device = 0;
        ib.qp.qp_num = 0x1234 + proxy;
        ib.qp.length = bytes;
        Ev n;
        n.type = abi::kNetPlugin;
        n.parent = h;
        n.rank = s->comm->spec.rank;
        n.net_id = abi::kNetPluginTypeIb | 1;
        n.net_data = &ib;
        if (void* nh = impl->Start(s->comm->ctx, n)) impl->Stop(nh);
      }
    }
    impl->Stop(h);
  });
}

void Op::ProxyOpStop(int proxy) {
  State* s = state_.get();
  s->impl->proxy.Run([&] {
    std::lock_guard<std::mutex> lock(s->mu);
    if (proxy < 0 || proxy >= static_cast<int>(s->proxies.size())) return;
    auto& p = s->proxies[proxy];
    if (p.handle != nullptr) s->impl->Stop(p.handle);
    p.handle = nullptr;
  });
}

void Op::KernelStart(int channel, uint64_t gpu_ns) {
  State* s = state_.get();
  s->impl->proxy.Run([&] {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->Emits(abi::kKernelCh) || s->kernels.count(channel)) return;
    Ev e;
    e.type = abi::kKernelCh;
    e.parent = s->coll;
    e.n_channels = static_cast<uint8_t>(channel);
    e.p_timer = gpu_ns;
    s->kernels[channel] = s->impl->Start(s->comm->ctx, e);
  });
}

void Op::KernelStop(int channel, uint64_t gpu_ns) {
  State* s = state_.get();
  s->impl->proxy.Run([&] {
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->kernels.find(channel);
    if (it == s->kernels.end() || it->second == nullptr) return;
    if (s->impl->version >= 4) {
      s->impl->Record(it->second, abi::kKernelChStop, gpu_ns);
    }
    s->impl->Stop(it->second);
    it->second = nullptr;
  });
}

[[noreturn]] void SimulateCrash(int exit_code) { _exit(exit_code); }

}  // namespace pitstop::emu
