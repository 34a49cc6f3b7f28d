/* The C API a trainer calls so pitstop can migrate its rank
   (docs/migration.md "Two-phase rebuild and state transfer (library)").

   Implemented by libnccl-profiler-pitstop.so (LD_PRELOADed, with
   PITSTOP_VIRTUALIZE_COMMS=1). A trainer must also run without pitstop, so
   it calls the pitstop_try_* wrappers below: each looks the function up at
   run time (dlsym(RTLD_DEFAULT), once) and does nothing when the library
   is not loaded. Link with -ldl on glibc older than 2.34.

     pitstop_try_register_state("params", params, bytes);   // once, or when
     pitstop_try_register_state("next_step", &next, 8);     // a buffer moves
     for (step = first; step < steps; ++step) {
       next = step;
       int r = pitstop_try_poll(step);           // at every step boundary
       if (r == PITSTOP_TRAINER_LEAVE) break;    // state went to the joiner
       ...one training step...
     }

   A process started with PITSTOP_MIGRATION_ROLE=joiner creates its
   communicators as usual (it gets sandbox handles), registers the same
   buffers, then calls pitstop_try_join(&first, timeout_ms): it returns once
   the leaver's state is in the buffers and the handles are bound, with the
   first step to run.

   Node failure (a peer died): a collective of step S fails. Instead of
   exiting, the trainer calls pitstop_try_recover(S, &redo, timeout_ms),
   which returns once the recovery migration says which step every rank
   redoes (S or S-1: a peer may have finished S); the trainer puts its
   registered state back as of the start of step `redo` (keep the last two
   steps' starting state), calls pitstop_try_resume(redo) (a replica sends
   that state to the joiner; every communicator is switched to its
   replacement) and runs step `redo` again. An error from either: training
   cannot go on.

   Threads: call from the training loop's thread. The buffers are host
   memory and must stay valid while registered. All entry points are
   noexcept. */
#ifndef PITSTOP_TRAINER_H_
#define PITSTOP_TRAINER_H_

#include <dlfcn.h>
#include <stdint.h>

#ifdef __cplusplus
#define PITSTOP_TRAINER_NOEXCEPT noexcept
extern "C" {
#else
#define PITSTOP_TRAINER_NOEXCEPT
#endif

/* pitstop_trainer_poll results; errors are negative. */
#define PITSTOP_TRAINER_CONTINUE 0
#define PITSTOP_TRAINER_LEAVE 1
#define PITSTOP_TRAINER_ERROR (-1)
/* The library is not loaded (or migration is off: no
   PITSTOP_VIRTUALIZE_COMMS=1 / PITSTOP_MIGRATION_ROLE=joiner for a join). */
#define PITSTOP_TRAINER_UNAVAILABLE (-2)

/* Registers (or, by the same name, moves) a buffer of the state a joiner
   needs: sent in registration order. 0 or an error. */
int pitstop_trainer_register_state(const char* name, void* data,
                                   uint64_t bytes) PITSTOP_TRAINER_NOEXCEPT;
/* At a step boundary, before step `next_step`: CONTINUE; LEAVE when this
   rank's state went to a joiner and the process should exit (no more
   collectives); an error when the migration failed here (training goes on
   on the communicators it had). */
int pitstop_trainer_poll(uint64_t next_step) PITSTOP_TRAINER_NOEXCEPT;
/* Joiner: waits up to `timeout_ms` for the state; 0 with *next_step set
   (the first step to run), or an error. */
int pitstop_trainer_join(uint64_t* next_step,
                         int64_t timeout_ms) PITSTOP_TRAINER_NOEXCEPT;
/* Node failure: the collective of step `failed_step` failed. Waits up to
   `timeout_ms` for the recovery migration; 0 with *redo_step (the step to
   run again), or an error (aborted, timed out, not loaded: exit). */
int pitstop_trainer_recover(uint64_t failed_step, uint64_t* redo_step,
                            int64_t timeout_ms) PITSTOP_TRAINER_NOEXCEPT;
/* After recover: the registered state is back as of the start of
   `redo_step`; switches the communicators. 0 or an error. */
int pitstop_trainer_resume(uint64_t redo_step) PITSTOP_TRAINER_NOEXCEPT;
/* Why the last call on this thread failed ("" if none). */
const char* pitstop_trainer_last_error(void) PITSTOP_TRAINER_NOEXCEPT;

#ifdef __cplusplus
}
#endif

/* The run-time lookup: one dlsym per function and translation unit. */
#define PITSTOP_TRAINER_RESOLVE(type, name) \
  static int resolved_ = 0;                 \
  static type fn_ = 0;                      \
  if (!resolved_) {                         \
    fn_ = (type)dlsym(RTLD_DEFAULT, #name); \
    resolved_ = 1;                          \
  }

static inline int pitstop_try_register_state(const char* name, void* data,
                                             uint64_t bytes) {
  typedef int (*Fn)(const char*, void*, uint64_t);
  PITSTOP_TRAINER_RESOLVE(Fn, pitstop_trainer_register_state)
  return fn_ != 0 ? fn_(name, data, bytes) : PITSTOP_TRAINER_UNAVAILABLE;
}

static inline int pitstop_try_poll(uint64_t next_step) {
  typedef int (*Fn)(uint64_t);
  PITSTOP_TRAINER_RESOLVE(Fn, pitstop_trainer_poll)
  return fn_ != 0 ? fn_(next_step) : PITSTOP_TRAINER_CONTINUE;
}

static inline int pitstop_try_join(uint64_t* next_step, int64_t timeout_ms) {
  typedef int (*Fn)(uint64_t*, int64_t);
  PITSTOP_TRAINER_RESOLVE(Fn, pitstop_trainer_join)
  return fn_ != 0 ? fn_(next_step, timeout_ms) : PITSTOP_TRAINER_UNAVAILABLE;
}

static inline int pitstop_try_recover(uint64_t failed_step, uint64_t* redo_step,
                                      int64_t timeout_ms) {
  typedef int (*Fn)(uint64_t, uint64_t*, int64_t);
  PITSTOP_TRAINER_RESOLVE(Fn, pitstop_trainer_recover)
  return fn_ != 0 ? fn_(failed_step, redo_step, timeout_ms)
                  : PITSTOP_TRAINER_UNAVAILABLE;
}

static inline int pitstop_try_resume(uint64_t redo_step) {
  typedef int (*Fn)(uint64_t);
  PITSTOP_TRAINER_RESOLVE(Fn, pitstop_trainer_resume)
  return fn_ != 0 ? fn_(redo_step) : PITSTOP_TRAINER_UNAVAILABLE;
}

static inline const char* pitstop_try_last_error(void) {
  typedef const char* (*Fn)(void);
  PITSTOP_TRAINER_RESOLVE(Fn, pitstop_trainer_last_error)
  return fn_ != 0 ? fn_() : "the pitstop library is not loaded";
}

#undef PITSTOP_TRAINER_RESOLVE

#endif /* PITSTOP_TRAINER_H_ */
