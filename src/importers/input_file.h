// Reading input files that may be gzip-compressed, in one piece or as a
// stream, with errors that name the file and the byte offset.
//
//   ASSIGN_OR_RETURN(std::string bytes, ReadInputFile("/d/_dump_0"));
//
//   auto in = InputStream::Open("/t/trace.json.gz");   // streaming
//   std::istream& s = (*in)->stream();                 // feed a parser
//   RETURN_IF_ERROR((*in)->status());                  // after reading
//
// Gzip is detected by its magic bytes (1f 8b), not the file name;
// concatenated gzip members are read in sequence. A stream that ends inside a
// gzip member gives InvalidArgument "<path>: truncated gzip stream at
// compressed byte offset <n> (<m> bytes decompressed)"; corrupt data names the
// offset and zlib's message. A missing/unreadable file is NotFound /
// PermissionDenied-like InvalidArgument naming the path and errno text.
#ifndef PITSTOP_IMPORTERS_INPUT_FILE_H_
#define PITSTOP_IMPORTERS_INPUT_FILE_H_

#include <cstdint>
#include <istream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pitstop::importers {

// Caps on what one compressed input may inflate to (docs/reliability.md,
// "Bounded inputs"). A gzip bomb (2 MB of zeros that inflate to 2 GiB) is
// refused at the cap with ResourceExhausted naming the file and the
// compressed byte offset where it was hit, before memory is spent on it.
struct DecompressLimits {
  // Decompressed bytes of one file (`pitstop analyze --max-input-mib`).
  uint64_t max_bytes = uint64_t{1} << 30;
  // Decompressed bytes per compressed byte, checked once kRatioGrace bytes
  // are out (`--max-gzip-ratio`). Real traces compress 10-20:1; zeros
  // compress ~1000:1.
  uint64_t max_ratio = 100;
  // Output below this is never refused for its ratio: a small file of
  // repeated text legitimately compresses far better than a trace.
  static constexpr uint64_t kRatioGrace = uint64_t{1} << 20;
};

// Reads (and gunzips) the whole file within `limits` (ResourceExhausted
// beyond them; uncompressed files are held to max_bytes too).
absl::StatusOr<std::string> ReadInputFile(const std::string& path,
                                          const DecompressLimits& limits = {});

// Decompresses an in-memory buffer that may be gzip (returned as is when it
// is not). `name` labels errors. Used by the fuzzers and tests.
absl::StatusOr<std::string> MaybeGunzip(absl::string_view data,
                                        absl::string_view name,
                                        const DecompressLimits& limits = {});

// A std::istream over a file, gunzipped on the fly when compressed. Memory
// stays bounded (64 KiB buffers) whatever the file size.
class InputStream {
 public:
  // Only a regular file is opened (pitstop/bounded_file.h): a FIFO or a
  // device is refused by name. Reading past `limits` ends the stream with
  // status() ResourceExhausted.
  static absl::StatusOr<std::unique_ptr<InputStream>> Open(
      const std::string& path, const DecompressLimits& limits = {});
  // Over a memory buffer (not copied; must outlive the stream).
  static std::unique_ptr<InputStream> FromMemory(
      absl::string_view data, absl::string_view name,
      const DecompressLimits& limits = {});
  virtual ~InputStream() = default;

  virtual std::istream& stream() = 0;
  // OK, or the first read/decompression error (the stream then reports EOF).
  virtual absl::Status status() const = 0;
  // Compressed bytes consumed so far (for progress output).
  virtual uint64_t compressed_offset() const = 0;
  // Total size of the file (compressed), 0 if unknown.
  virtual uint64_t file_size() const = 0;
};

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_INPUT_FILE_H_
