// A safe decoder for Python pickles (protocols 0-5) that accepts only the
// data opcodes: dict, list, tuple, set, str, bytes, int, float, bool, None,
// MARK and the memo (PUT/GET/MEMOIZE). Any opcode that would import or call
// Python code (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
// NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, out-of-band buffers) is refused:
// a Flight Recorder dump is untrusted input.
//
// The result is converted to a JSON tree (nlohmann::json) because the same
// readers also accept the JSON form newer PyTorch writes: tuples and sets
// become arrays, bytes become strings, dict keys are converted to strings
// (int keys print as decimal), non-finite floats become null.
//
// Errors are InvalidArgument "<name>: offset <byte>: <what>" where <name> is
// the caller's label (usually the file path) and <byte> the offset of the
// opcode at fault, e.g.
//   "/dumps/_dump_3: offset 17: opcode 0x63 'GLOBAL' refused: pickles that
//    import or call code are not accepted (a dump is untrusted input)".
//
// Limits: nesting depth 256 when converting, integers must fit in int64
// (FR dumps hold ns timestamps, well inside), lengths are checked against the
// remaining input. Runs in O(input) time and memory; never recurses while
// decoding.
#ifndef PITSTOP_IMPORTERS_PICKLE_DECODER_H_
#define PITSTOP_IMPORTERS_PICKLE_DECODER_H_

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pitstop::importers {

// Decodes one pickle (up to its STOP opcode; trailing bytes are ignored).
absl::StatusOr<nlohmann::json> DecodePickle(absl::string_view data,
                                            absl::string_view name);

// True if `data` starts like a pickle of protocol >= 2 (0x80 PROTO byte).
bool LooksLikePickle(absl::string_view data);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_PICKLE_DECODER_H_
