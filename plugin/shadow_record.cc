#include "plugin/shadow_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace pitstop::plugin {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv(uint64_t h, const void* p, uint64_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (uint64_t i = 0; i < n; ++i) h = (h ^ b[i]) * kFnvPrime;
  return h;
}

template <typename T>
void Put(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out->push_back(static_cast<char>(static_cast<uint64_t>(v) >> (8 * i)));
  }
}

template <typename T>
T Get(std::string_view s, size_t* at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= uint64_t{static_cast<unsigned char>(s[*at + i])} << (8 * i);
  }
  *at += sizeof(T);
  return static_cast<T>(v);
}

// The key's fields in file order (the part of the header after magic and
// version, less bytes and checksum).
void PutKey(std::string* out, const ShadowKey& k) {
  Put(out, static_cast<uint32_t>(k.func));
  Put(out, k.comm_hash);
  Put(out, k.seq);
  Put(out, k.dtype);
  Put(out, k.op);
  Put(out, k.root);
  Put(out, k.rank);
  Put(out, k.count);
}

std::string Describe(const ShadowKey& k) {
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "comm %016llx seq %llu func %u dtype %d op %d root %d rank %d "
                "count %llu",
                static_cast<unsigned long long>(k.comm_hash),
                static_cast<unsigned long long>(k.seq),
                static_cast<unsigned>(k.func), k.dtype, k.op, k.root, k.rank,
                static_cast<unsigned long long>(k.count));
  return buf;
}

bool Fail(std::string* error, std::string why) {
  if (error != nullptr) *error = std::move(why);
  return false;
}

}  // namespace

uint64_t ShadowKeyHash(const ShadowKey& key) noexcept {
  try {
    std::string s;
    PutKey(&s, key);
    return Fnv(kFnvOffset, s.data(), s.size());
  } catch (...) {
    return 0;
  }
}

std::string ShadowFileName(const ShadowKey& key) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx.rec",
                static_cast<unsigned long long>(ShadowKeyHash(key)));
  return buf;
}

size_t ShadowDtypeBytes(int32_t dtype) noexcept {
  // ncclInt8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32,
  // Float64, Bfloat16, Float8e4m3, Float8e5m2 (nccl.h's order).
  static constexpr size_t kBytes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  if (dtype < 0 || dtype >= static_cast<int32_t>(std::size(kBytes))) return 0;
  return kBytes[dtype];
}

bool ShadowOutput(const ShadowCall& call, int rank, int n_ranks, ShadowKey* key,
                  uint64_t* bytes) noexcept {
  const size_t elem = ShadowDtypeBytes(call.dtype);
  if (elem == 0 || n_ranks < 1 || rank < 0 || rank >= n_ranks) return false;
  *key = ShadowKey{.func = call.func,
                   .dtype = call.dtype,
                   .op = call.op,
                   .root = call.root,
                   .rank = rank,
                   .count = call.count};
  uint64_t elems = call.count;
  switch (call.func) {
    case ShadowFunc::kAllReduce:
    case ShadowFunc::kBroadcast:
      key->rank = -1;
      break;
    case ShadowFunc::kAllGather:
      key->rank = -1;
      elems *= static_cast<uint64_t>(n_ranks);
      break;
    case ShadowFunc::kReduceScatter:
    case ShadowFunc::kScatter:
      break;
    case ShadowFunc::kAlltoAll:
      elems *= static_cast<uint64_t>(n_ranks);
      break;
    case ShadowFunc::kReduce:
      if (rank != call.root) return false;
      break;
    case ShadowFunc::kGather:
      if (rank != call.root) return false;
      elems *= static_cast<uint64_t>(n_ranks);
      break;
    default:
      return false;
  }
  *bytes = elems * elem;
  return true;
}

std::string EncodeShadowRecord(const ShadowKey& key, const void* data,
                               uint64_t bytes) {
  std::string out(kShadowMagic, sizeof(kShadowMagic));
  out.reserve(kShadowHeaderBytes + bytes);
  Put(&out, kShadowVersion);
  PutKey(&out, key);
  Put(&out, bytes);
  Put(&out, Fnv(kFnvOffset, data, bytes));
  out.append(static_cast<const char*>(data), bytes);
  return out;
}

bool DecodeShadowRecord(std::string_view file, const ShadowKey& want, void* out,
                        uint64_t out_bytes, std::string* error) {
  if (file.size() < kShadowHeaderBytes ||
      file.substr(0, sizeof(kShadowMagic)) !=
          std::string_view(kShadowMagic, sizeof(kShadowMagic))) {
    return Fail(error, "not a shadow record (bad magic or truncated header)");
  }
  size_t at = sizeof(kShadowMagic);
  const auto version = Get<uint32_t>(file, &at);
  if (version != kShadowVersion) {
    return Fail(error, "shadow record version " + std::to_string(version) +
                           ", expected " + std::to_string(kShadowVersion));
  }
  std::string key_bytes;
  PutKey(&key_bytes, want);
  if (file.substr(at, key_bytes.size()) != key_bytes) {
    return Fail(error, "the record is of another collective (wanted " +
                           Describe(want) + ")");
  }
  at += key_bytes.size();
  const auto bytes = Get<uint64_t>(file, &at);
  const auto sum = Get<uint64_t>(file, &at);
  if (bytes != out_bytes || file.size() - at != bytes) {
    return Fail(error, "the record holds " + std::to_string(bytes) +
                           " bytes (file: " + std::to_string(file.size() - at) +
                           "), the call wants " + std::to_string(out_bytes));
  }
  if (Fnv(kFnvOffset, file.data() + at, bytes) != sum) {
    return Fail(error, "the record's checksum does not match its bytes");
  }
  if (bytes > 0) std::memcpy(out, file.data() + at, bytes);
  return true;
}

bool WriteShadowRecord(const std::string& dir, const ShadowKey& key,
                       const void* data, uint64_t bytes, std::string* error) {
  const std::string path = dir + "/" + ShadowFileName(key);
  // Per process: two recorders of one key never share a temporary file.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const std::string file = EncodeShadowRecord(key, data, bytes);
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(error, tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < file.size()) {
    const ssize_t n = write(fd, file.data() + done, file.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return Fail(error, tmp + ": " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return Fail(error, path + ": " + std::strerror(e));
  }
  return true;
}

bool ReadShadowRecord(const std::string& dir, const ShadowKey& key, void* out,
                      uint64_t out_bytes, std::string* error) {
  const std::string path = dir + "/" + ShadowFileName(key);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Fail(
        error, path + ": " + std::strerror(errno) + " (" + Describe(key) + ")");
  }
  // One byte more than a fitting record: a longer file reads as the wrong
  // size instead of being cut to fit.
  std::string file(kShadowHeaderBytes + out_bytes + 1, '\0');
  size_t got = 0;
  while (got < file.size()) {
    const ssize_t n = read(fd, file.data() + got, file.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  file.resize(got);
  if (!DecodeShadowRecord(file, key, out, out_bytes, error)) {
    if (error != nullptr) *error = path + ": " + *error;
    return false;
  }
  return true;
}

}  // namespace pitstop::plugin
