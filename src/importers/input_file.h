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

// Reads (and gunzips) the whole file. `max_bytes` caps the decompressed size
// (ResourceExhausted beyond it).
absl::StatusOr<std::string> ReadInputFile(const std::string& path,
                                          uint64_t max_bytes = 4ull << 30);

// Decompresses an in-memory buffer that may be gzip (returned as is when it
// is not). `name` labels errors. Used by the fuzzers and tests.
absl::StatusOr<std::string> MaybeGunzip(absl::string_view data,
                                        absl::string_view name,
                                        uint64_t max_bytes = 4ull << 30);

// A std::istream over a file, gunzipped on the fly when compressed. Memory
// stays bounded (64 KiB buffers) whatever the file size.
class InputStream {
 public:
  static absl::StatusOr<std::unique_ptr<InputStream>> Open(
      const std::string& path);
  // Over a memory buffer (not copied; must outlive the stream).
  static std::unique_ptr<InputStream> FromMemory(absl::string_view data,
                                                 absl::string_view name);
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
