// The exported trainer C API (include/pitstop/trainer.h) over the
// runtime's Rebuilder (plugin/rebuild.h). Migration needs communicator
// virtualisation (PITSTOP_VIRTUALIZE_COMMS=1): without it, registration is
// accepted and ignored, a poll always continues and a join is unavailable.
#include <string>

#include "pitstop/trainer.h"
#include "plugin/rebuild.h"
#include "plugin/runtime.h"
#include "plugin/virtual_comms.h"

namespace pitstop::plugin {
namespace {

std::string& ThreadError() {
  static thread_local std::string error;
  return error;
}

Rebuilder* Migration() {
  if (!VirtualizationEnabled()) return nullptr;
  if (Runtime* rt = Runtime::Get()) {
    if (Rebuilder* r = rt->rebuilder()) return r;
  }
  Runtime* rt = Runtime::GetOrCreate();
  return rt != nullptr ? rt->EnableMigration(&g_comm_table) : nullptr;
}

int Result(int r, std::string* error) {
  ThreadError() = r < 0 ? *error : std::string();
  return r;
}

}  // namespace
}  // namespace pitstop::plugin

namespace pp = pitstop::plugin;

PITSTOP_EXPORT int pitstop_trainer_register_state(const char* name, void* data,
                                                  uint64_t bytes) noexcept {
  try {
    pp::Rebuilder* r = pp::Migration();
    if (r == nullptr) return 0;
    std::string error;
    return pp::Result(r->RegisterState(name, data, bytes, &error), &error);
  } catch (...) {
    return PITSTOP_TRAINER_ERROR;
  }
}

PITSTOP_EXPORT int pitstop_trainer_poll(uint64_t next_step) noexcept {
  try {
    pp::Runtime* rt = pp::Runtime::Get();
    pp::Rebuilder* r = rt != nullptr ? rt->rebuilder() : nullptr;
    if (r == nullptr) return PITSTOP_TRAINER_CONTINUE;
    std::string error;
    return pp::Result(r->Poll(next_step, &error), &error);
  } catch (...) {
    return PITSTOP_TRAINER_ERROR;
  }
}

PITSTOP_EXPORT int pitstop_trainer_join(uint64_t* next_step,
                                        int64_t timeout_ms) noexcept {
  try {
    std::string error;
    if (next_step == nullptr) {
      error = "pitstop_trainer_join: next_step is NULL";
      return pp::Result(PITSTOP_TRAINER_ERROR, &error);
    }
    pp::Rebuilder* r = pp::MigrationJoiner() ? pp::Migration() : nullptr;
    if (r == nullptr) {
      error =
          "pitstop_trainer_join needs PITSTOP_MIGRATION_ROLE=joiner and "
          "PITSTOP_VIRTUALIZE_COMMS=1";
      return pp::Result(PITSTOP_TRAINER_UNAVAILABLE, &error);
    }
    return pp::Result(r->Join(next_step, timeout_ms, &error), &error);
  } catch (...) {
    return PITSTOP_TRAINER_ERROR;
  }
}

PITSTOP_EXPORT int pitstop_trainer_recover(uint64_t failed_step,
                                           uint64_t* redo_step,
                                           int64_t timeout_ms) noexcept {
  try {
    std::string error;
    if (redo_step == nullptr) {
      error = "pitstop_trainer_recover: redo_step is NULL";
      return pp::Result(PITSTOP_TRAINER_ERROR, &error);
    }
    pp::Rebuilder* r = pp::Migration();
    if (r == nullptr) {
      error = "pitstop_trainer_recover needs PITSTOP_VIRTUALIZE_COMMS=1";
      return pp::Result(PITSTOP_TRAINER_UNAVAILABLE, &error);
    }
    return pp::Result(r->Recover(failed_step, redo_step, timeout_ms, &error),
                      &error);
  } catch (...) {
    return PITSTOP_TRAINER_ERROR;
  }
}

PITSTOP_EXPORT int pitstop_trainer_resume(uint64_t redo_step) noexcept {
  try {
    pp::Runtime* rt = pp::Runtime::Get();
    pp::Rebuilder* r = rt != nullptr ? rt->rebuilder() : nullptr;
    std::string error = "pitstop_trainer_resume: no recovery in this process";
    if (r == nullptr) return pp::Result(PITSTOP_TRAINER_UNAVAILABLE, &error);
    return pp::Result(r->Resume(redo_step, &error), &error);
  } catch (...) {
    return PITSTOP_TRAINER_ERROR;
  }
}

PITSTOP_EXPORT const char* pitstop_trainer_last_error() noexcept {
  return pp::ThreadError().c_str();
}
