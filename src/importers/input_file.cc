#include "src/importers/input_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <streambuf>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/bounded_file.h"

namespace pitstop::importers {
namespace {

constexpr size_t kBufferBytes = 64 * 1024;

// Where compressed bytes come from: a FILE* or a memory buffer.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `n` bytes; 0 at end. Sets *error on an I/O error.
  virtual size_t Read(char* out, size_t n, std::string* error) = 0;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(FILE* f) : f_(f) {}
  ~FileSource() override { std::fclose(f_); }
  size_t Read(char* out, size_t n, std::string* error) override {
    size_t got = std::fread(out, 1, n, f_);
    if (got == 0 && std::ferror(f_)) *error = std::strerror(errno);
    return got;
  }

 private:
  FILE* f_;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(absl::string_view data) : data_(data) {}
  size_t Read(char* out, size_t n, std::string*) override {
    size_t got = std::min(n, data_.size() - pos_);
    std::memcpy(out, data_.data() + pos_, got);
    pos_ += got;
    return got;
  }

 private:
  absl::string_view data_;
  size_t pos_ = 0;
};

// A streambuf that passes bytes through, or inflates them when the input
// starts with the gzip magic.
class DecodingBuf final : public std::streambuf {
 public:
  DecodingBuf(std::unique_ptr<ByteSource> source, std::string name,
              const DecompressLimits& limits)
      : source_(std::move(source)),
        name_(std::move(name)),
        limits_(limits),
        in_(kBufferBytes),
        out_(kBufferBytes) {
    setg(out_.data(), out_.data(), out_.data());
  }
  ~DecodingBuf() override {
    if (inflating_) inflateEnd(&z_);
  }

  const absl::Status& status() const { return status_; }
  uint64_t consumed() const { return consumed_ - z_.avail_in; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (!status_.ok()) return traits_type::eof();
    size_t n = Fill();
    if (n == 0 || !WithinLimits()) return traits_type::eof();
    setg(out_.data(), out_.data(), out_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  // Checks the decompressed total against the caps once a chunk is out; the
  // chunk (64 KiB at most) is not handed on when a cap is passed.
  bool WithinLimits() {
    const uint64_t in = std::max<uint64_t>(consumed(), 1);
    const char* what = nullptr;
    if (decompressed_ > limits_.max_bytes) {
      what = "size";
    } else if (gzip_ && decompressed_ > DecompressLimits::kRatioGrace &&
               decompressed_ / in > limits_.max_ratio) {
      what = "ratio";
    }
    if (what == nullptr) return true;
    status_ = absl::ResourceExhaustedError(absl::StrCat(
        name_, ": decompression ", what,
        " limit hit at compressed byte offset ", consumed(), " (",
        decompressed_, " bytes out; limits: ", limits_.max_bytes,
        " bytes, ratio ", limits_.max_ratio,
        ":1; pitstop analyze --max-input-mib / --max-gzip-ratio raise them)"));
    return false;
  }

  // Refills the compressed buffer; false at end of input.
  bool ReadMore() {
    std::string error;
    size_t got = source_->Read(in_.data(), in_.size(), &error);
    if (!error.empty()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat(name_, ": read error at byte ", consumed_, ": ", error));
      return false;
    }
    z_.next_in = reinterpret_cast<Bytef*>(in_.data());
    z_.avail_in = static_cast<uInt>(got);
    consumed_ += got;
    return got > 0;
  }

  size_t Fill() {
    if (!started_) {
      started_ = true;
      std::memset(&z_, 0, sizeof(z_));
      if (!ReadMore()) return 0;
      gzip_ = z_.avail_in >= 2 && static_cast<uint8_t>(in_[0]) == 0x1f &&
              static_cast<uint8_t>(in_[1]) == 0x8b;
      if (gzip_) {
        if (inflateInit2(&z_, 15 + 32) != Z_OK) {
          status_ =
              absl::InternalError(absl::StrCat(name_, ": zlib init failed"));
          return 0;
        }
        inflating_ = true;
      }
    }
    if (!gzip_) {
      if (z_.avail_in == 0 && !ReadMore()) return 0;
      size_t n = z_.avail_in;
      std::memcpy(out_.data(), z_.next_in, n);
      z_.avail_in = 0;
      decompressed_ += n;
      return n;
    }
    return Inflate();
  }

  size_t Inflate() {
    while (true) {
      if (z_.avail_in == 0) {
        bool more = ReadMore();
        if (!status_.ok()) return 0;
        if (!more) {
          if (member_open_) {
            status_ = absl::InvalidArgumentError(absl::StrCat(
                name_, ": truncated gzip stream at compressed byte offset ",
                consumed_, " (", decompressed_, " bytes decompressed)"));
          }
          return 0;
        }
      }
      if (!member_open_) {
        // Start of a (further) gzip member; anything else is trailing junk.
        if (static_cast<uint8_t>(*z_.next_in) != 0x1f) {
          if (decompressed_ == 0) {
            status_ = absl::InvalidArgumentError(
                absl::StrCat(name_, ": not a gzip stream"));
          }
          z_.avail_in = 0;
          return 0;
        }
        inflateReset(&z_);
        member_open_ = true;
      }
      z_.next_out = reinterpret_cast<Bytef*>(out_.data());
      z_.avail_out = static_cast<uInt>(out_.size());
      int rc = inflate(&z_, Z_NO_FLUSH);
      size_t n = out_.size() - z_.avail_out;
      decompressed_ += n;
      if (rc == Z_STREAM_END) {
        member_open_ = false;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        status_ = absl::InvalidArgumentError(absl::StrCat(
            name_, ": corrupt gzip data near compressed byte offset ",
            consumed(), ": ", z_.msg != nullptr ? z_.msg : "inflate error"));
        return 0;
      }
      if (n > 0) return n;
    }
  }

  std::unique_ptr<ByteSource> source_;
  std::string name_;
  DecompressLimits limits_;
  std::vector<char> in_;
  std::vector<char> out_;
  z_stream z_;
  bool started_ = false;
  bool gzip_ = false;
  bool inflating_ = false;
  bool member_open_ = false;
  uint64_t consumed_ = 0;
  uint64_t decompressed_ = 0;
  absl::Status status_;
};

class InputStreamImpl final : public InputStream {
 public:
  InputStreamImpl(std::unique_ptr<ByteSource> source, std::string name,
                  uint64_t size, const DecompressLimits& limits)
      : buf_(std::move(source), std::move(name), limits),
        stream_(&buf_),
        size_(size) {}

  std::istream& stream() override { return stream_; }
  absl::Status status() const override { return buf_.status(); }
  uint64_t compressed_offset() const override { return buf_.consumed(); }
  uint64_t file_size() const override { return size_; }

 private:
  DecodingBuf buf_;
  std::istream stream_;
  uint64_t size_;
};

// The stream enforces the limits; out never holds more than max_bytes.
absl::StatusOr<std::string> Drain(InputStream* in) {
  std::string out;
  std::vector<char> chunk(kBufferBytes);
  while (true) {
    in->stream().read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    std::streamsize got = in->stream().gcount();
    if (got <= 0) break;
    out.append(chunk.data(), static_cast<size_t>(got));
  }
  if (!in->status().ok()) return in->status();
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InputStream>> InputStream::Open(
    const std::string& path, const DecompressLimits& limits) {
  // A FIFO or a device named on the command line is refused, not read
  // forever.
  absl::StatusOr<RegularFile> file = RegularFile::Open(path, "");
  if (!file.ok()) return file.status();
  const uint64_t size = file->size();
  FILE* f = fdopen(file->fd(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  file->Release();
  return std::unique_ptr<InputStream>(
      new InputStreamImpl(std::make_unique<FileSource>(f), path, size, limits));
}

std::unique_ptr<InputStream> InputStream::FromMemory(
    absl::string_view data, absl::string_view name,
    const DecompressLimits& limits) {
  return std::make_unique<InputStreamImpl>(std::make_unique<MemorySource>(data),
                                           std::string(name), data.size(),
                                           limits);
}

absl::StatusOr<std::string> ReadInputFile(const std::string& path,
                                          const DecompressLimits& limits) {
  auto in = InputStream::Open(path, limits);
  if (!in.ok()) return in.status();
  return Drain(in->get());
}

absl::StatusOr<std::string> MaybeGunzip(absl::string_view data,
                                        absl::string_view name,
                                        const DecompressLimits& limits) {
  std::unique_ptr<InputStream> in = InputStream::FromMemory(data, name, limits);
  return Drain(in.get());
}

}  // namespace pitstop::importers
