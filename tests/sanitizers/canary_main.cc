// sanitizer_canary SHAPE [LIBRARY]: runs one planted defect
// (canary_shapes.h) so that sanitizer_canary_test can check the sanitizer
// reports it under the project's suppression files. Exit 0: the defect ran
// and nothing stopped the program; 3: the defect could not be made to
// happen; 2: usage. Under TSan a reported race exits 66 first.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "tests/sanitizers/canary_shapes.h"

namespace pitstop::canary {

int PluginThreadRace(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "canary: dlopen %s: %s\n", library.c_str(), dlerror());
    return 2;
  }
  auto init = reinterpret_cast<void (*)()>(dlsym(lib, "pitstop_canary_init"));
  auto record =
      reinterpret_cast<void (*)(uint64_t)>(dlsym(lib, "pitstop_canary_record"));
  auto finalize =
      reinterpret_cast<int (*)()>(dlsym(lib, "pitstop_canary_finalize"));
  if (init == nullptr || record == nullptr || finalize == nullptr) {
    std::fprintf(stderr, "canary: %s lacks the canary's symbols\n",
                 library.c_str());
    return 2;
  }
  init();
  // NCCL's thread, calling the library.
  std::thread caller([&] {
    for (int i = 0; i < 100; ++i) record(1);
  });
  caller.join();
  const int seen = finalize();
  dlclose(lib);
  return seen ? 0 : kNotExercised;
}

}  // namespace pitstop::canary

int main(int argc, char** argv) {
  using namespace pitstop::canary;
  const std::string shape = argc > 1 ? argv[1] : "";
  int rc = -1;
  if (shape == "sync-handler-race") rc = SyncHandlerRace();
  if (shape == "reactor-race") rc = ReactorRace();
  if (shape == "map-race") rc = MapRace();
  if (shape == "proto-race") rc = ProtoRace();
  if (shape == "string-race") rc = StringRace();
  if (shape == "plugin-thread-race" && argc > 2) rc = PluginThreadRace(argv[2]);
  if (shape == "handler-leak") rc = HandlerLeak();
  if (shape == "reactor-leak") rc = ReactorLeak();
  if (rc == -1) {
    std::fprintf(stderr,
                 "usage: %s sync-handler-race | reactor-race | map-race | "
                 "proto-race | string-race | plugin-thread-race LIBRARY | "
                 "handler-leak | "
                 "reactor-leak\n",
                 argv[0]);
    return 2;
  }
  if (rc == 0) {
    std::fprintf(stderr, "canary %s: planted defect ran to the end\n",
                 shape.c_str());
  } else if (rc == kNotExercised) {
    std::fprintf(stderr,
                 "canary %s: planted defect could not be made to "
                 "happen\n",
                 shape.c_str());
  }
  return rc;
}
