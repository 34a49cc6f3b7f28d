// Planted defects, one per shape of threaded code pitstop has, for the
// sanitizer canaries (sanitizer_canary_test.cc, docs/testing.md). Each
// function runs one shape with its defect and returns normally only if the
// sanitizer let it pass: under TSan a race report ends the process with
// exit code 66 (halt_on_error=1), under ASan a leak is reported at exit.
//
// Each returns 0 when the defect ran as planted, kNotExercised when the
// program could not make it happen (e.g. every call ran on one thread), so
// a canary never passes by not running its defect.
//
// Called from the canary program's main thread only.
#ifndef PITSTOP_TESTS_SANITIZERS_CANARY_SHAPES_H_
#define PITSTOP_TESTS_SANITIZERS_CANARY_SHAPES_H_

#include <string>

namespace pitstop::canary {

inline constexpr int kNotExercised = 3;

// Races: the planted access runs on two threads with no happens-before.
// A counter of a sync gRPC service written by concurrent handlers.
int SyncHandlerRace();
// A counter shared by the bidi reactors of several streams (OnReadDone),
// the shape of the agent's IngestReactor and the controller's streams.
int ReactorRace();
// An absl::flat_hash_map behind a mutex that a reader forgets to take.
int MapRace();
// A protobuf repeated field (header-only RepeatedField<int>) filled from two
// threads, one of them without the lock.
int ProtoRace();
// A std::string member behind the same forgotten lock.
int StringRace();
// The in-process library's shape: a shared library, dlopen'ed like NCCL
// loads the profiler plugin, whose own thread reads what the caller's thread
// writes without an atomic. `library`: path of the canary library.
int PluginThreadRace(const std::string& library);

// Leaks: unreachable at exit, allocated inside a gRPC handler.
// A sync handler drops a `new std::vector<int>`.
int HandlerLeak();
// A bidi reactor whose OnDone does not delete it.
int ReactorLeak();

}  // namespace pitstop::canary

#endif  // PITSTOP_TESTS_SANITIZERS_CANARY_SHAPES_H_
