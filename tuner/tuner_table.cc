// The per-node tuner table (include/pitstop/tuner_table.h): layout, the
// seqlock, and the writer's and reader's mappings.
#include "pitstop/tuner_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace pitstop::tuner {
namespace {

// "PSTUNTBL" read as a little-endian word.
constexpr uint64_t kTableMagic = 0x4c42544e55545350ull;
// Seqlock retries before a reader reports busy (a writer rewrites one slot
// in well under a microsecond, so this only trips on a stalled writer).
constexpr int kMaxReadRetries = 64;

using A64 = std::atomic<uint64_t>;
using A32 = std::atomic<uint32_t>;
using AI32 = std::atomic<int32_t>;
static_assert(A64::is_always_lock_free && A32::is_always_lock_free &&
                  AI32::is_always_lock_free,
              "the table is shared between processes: atomics must be "
              "lock-free (address-free)");
static_assert(sizeof(A64) == 8 && sizeof(A32) == 4 && sizeof(AI32) == 4);

// The file's first 64 bytes. magic is written last by the writer (release),
// so a reader that sees it sees the rest.
struct Header {
  A64 magic;
  A32 version;
  A32 header_bytes;
  A32 slot_bytes;
  A32 capacity;
  A64 generation;
  A32 retired;  // 1: the writer renamed a newer table over the path
  A32 writer_pid;
  uint8_t reserved[24];
};
static_assert(sizeof(Header) == 64);
static_assert(offsetof(Header, generation) == 24);
static_assert(offsetof(Header, retired) == 32);

// One entry. Every field is an atomic word so concurrent access from other
// processes is defined; `seq` makes a set of them consistent.
struct Slot {
  A64 seq;      // even: stable; odd: being written
  A64 comm_id;  // 0: free
  A64 plan_epoch;
  A32 n_ranks;
  A32 n_nodes;
  AI32 max_channels;
  AI32 min_channels;
  A32 algo_mask;
  A32 proto_mask;
  A32 flags;
  A32 reserved[3];
};
static_assert(sizeof(Slot) == 64);
static_assert(offsetof(Slot, comm_id) == 8);
static_assert(offsetof(Slot, n_ranks) == 24);
static_assert(offsetof(Slot, flags) == 48);

size_t FileBytes(uint32_t capacity) {
  return sizeof(Header) + size_t{capacity} * sizeof(Slot);
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

Slot* Slots(void* base) {
  return reinterpret_cast<Slot*>(static_cast<char*>(base) + sizeof(Header));
}

// Seqlock read of one slot. False if it never held still.
//
// Fence-free form (Boehm, "Can seqlocks get along with programming language
// memory models?"): the writer stores fields with release, the reader loads
// them with acquire, so a reader that sees any new field value also sees
// the odd sequence stored before it, and the second sequence load differs.
// Plain moves on x86-64; and ThreadSanitizer understands it (fences it does
// not).
bool ReadSlot(const Slot& slot, Steering* out) {
  for (int i = 0; i < kMaxReadRetries; ++i) {
    uint64_t s1 = slot.seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    Steering s;
    s.comm_id = slot.comm_id.load(std::memory_order_acquire);
    s.plan_epoch = slot.plan_epoch.load(std::memory_order_acquire);
    s.n_ranks = slot.n_ranks.load(std::memory_order_acquire);
    s.n_nodes = slot.n_nodes.load(std::memory_order_acquire);
    s.max_channels = slot.max_channels.load(std::memory_order_acquire);
    s.min_channels = slot.min_channels.load(std::memory_order_acquire);
    s.algo_mask = slot.algo_mask.load(std::memory_order_acquire);
    s.proto_mask = slot.proto_mask.load(std::memory_order_acquire);
    s.flags = slot.flags.load(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) == s1) {
      *out = s;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string CheckTrustedFile(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Errno("cannot stat", path);
  if (!S_ISREG(st.st_mode)) return path + ": not a regular file";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o",
                  static_cast<unsigned>(st.st_mode & 07777));
    return path + ": writable by other users (mode " + mode + ")";
  }
  if (st.st_uid == 0) return "";
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  struct stat dst {};
  if (stat(dir.c_str(), &dst) != 0) return Errno("cannot stat", dir);
  if (dst.st_uid != st.st_uid) {
    return path + ": owned by uid " + std::to_string(st.st_uid) +
           ", neither root nor the owner of " + dir + " (uid " +
           std::to_string(dst.st_uid) + "): any user may create files there";
  }
  return "";
}

std::string ResolveTablePath(const std::string& path) {
  if (!path.empty()) return path;
  const char* env = std::getenv(kTableEnv);
  if (env != nullptr && env[0] != '\0') return env;
  return kDefaultTablePath;
}

std::string ValidateSteering(const Steering& s) {
  if (s.comm_id == 0) return "comm_id 0 is not a communicator";
  if (s.max_channels < 0 || s.min_channels < 0 || s.max_channels > 1024 ||
      s.min_channels > 1024) {
    return "channel counts must be in 0..1024";
  }
  if (s.max_channels != 0 && s.min_channels > s.max_channels) {
    return "min_channels above max_channels";
  }
  if ((s.algo_mask >> kNumAlgos) != 0) return "algo_mask names no algorithm";
  if ((s.proto_mask >> kNumProtos) != 0) return "proto_mask names no protocol";
  return "";
}

// ---- Writer ----------------------------------------------------------------

struct TunerTableWriter::Mapping {
  std::string path;
  void* base = nullptr;
  size_t bytes = 0;
  Header* header() const { return static_cast<Header*>(base); }
  Slot* slots() const { return Slots(base); }
  ~Mapping() {
    if (base != nullptr) munmap(base, bytes);
  }
};

// Marks the table open at `fd` retired so its readers reopen the path.
static void RetireFd(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Header))) {
    return;
  }
  void* p =
      mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return;
  auto* h = static_cast<Header*>(p);
  if (h->magic.load(std::memory_order_acquire) == kTableMagic) {
    h->retired.store(1, std::memory_order_release);
  }
  munmap(p, sizeof(Header));
}

std::unique_ptr<TunerTableWriter> TunerTableWriter::Create(
    const std::string& path_in, uint32_t capacity, std::string* error) {
  std::string path = ResolveTablePath(path_in);
  if (capacity == 0 || capacity > kMaxCapacity) {
    *error = "tuner table capacity must be 1.." + std::to_string(kMaxCapacity);
    return nullptr;
  }
  // Build the new table beside the path, then rename it over: a reader
  // opening the path sees either the old table or a complete new one.
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = Errno("cannot create tuner table", tmp);
    return nullptr;
  }
  fchmod(fd, 0644);  // readable by the training processes whatever the umask
  auto map = std::make_unique<Mapping>();
  map->path = path;
  map->bytes = FileBytes(capacity);
  if (ftruncate(fd, static_cast<off_t>(map->bytes)) != 0) {
    *error = Errno("cannot size tuner table", tmp);
    close(fd);
    unlink(tmp.c_str());
    return nullptr;
  }
  void* base =
      mmap(nullptr, map->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *error = Errno("cannot map tuner table", tmp);
    unlink(tmp.c_str());
    return nullptr;
  }
  map->base = base;  // ftruncate zeroed it: every slot free, seq 0
  Header* h = map->header();
  h->version.store(kTableVersion, std::memory_order_relaxed);
  h->header_bytes.store(sizeof(Header), std::memory_order_relaxed);
  h->slot_bytes.store(sizeof(Slot), std::memory_order_relaxed);
  h->capacity.store(capacity, std::memory_order_relaxed);
  h->generation.store(1, std::memory_order_relaxed);
  h->writer_pid.store(static_cast<uint32_t>(getpid()),
                      std::memory_order_relaxed);
  h->magic.store(kTableMagic, std::memory_order_release);
  // The old table is retired only after the new one is at the path, so a
  // reader that sees `retired` and reopens gets the new one.
  int old_fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    *error = Errno("cannot rename tuner table to", path);
    unlink(tmp.c_str());
    if (old_fd >= 0) close(old_fd);
    return nullptr;
  }
  if (old_fd >= 0) {
    RetireFd(old_fd);
    close(old_fd);
  }
  return std::unique_ptr<TunerTableWriter>(
      new TunerTableWriter(std::move(map)));
}

TunerTableWriter::TunerTableWriter(std::unique_ptr<Mapping> map)
    : map_(std::move(map)) {}
TunerTableWriter::~TunerTableWriter() = default;

uint32_t TunerTableWriter::capacity() const {
  return map_->header()->capacity.load(std::memory_order_relaxed);
}
uint64_t TunerTableWriter::generation() const {
  return map_->header()->generation.load(std::memory_order_relaxed);
}
const std::string& TunerTableWriter::path() const { return map_->path; }

void TunerTableWriter::WriteSlot(uint32_t index, const Steering& s) {
  Slot& slot = map_->slots()[index];
  uint64_t seq = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(seq + 1, std::memory_order_relaxed);
  slot.comm_id.store(s.comm_id, std::memory_order_release);
  slot.plan_epoch.store(s.plan_epoch, std::memory_order_release);
  slot.n_ranks.store(s.n_ranks, std::memory_order_release);
  slot.n_nodes.store(s.n_nodes, std::memory_order_release);
  slot.max_channels.store(s.max_channels, std::memory_order_release);
  slot.min_channels.store(s.min_channels, std::memory_order_release);
  slot.algo_mask.store(s.algo_mask, std::memory_order_release);
  slot.proto_mask.store(s.proto_mask, std::memory_order_release);
  slot.flags.store(s.flags, std::memory_order_release);
  slot.seq.store(seq + 2, std::memory_order_release);
  map_->header()->generation.fetch_add(1, std::memory_order_release);
}

bool TunerTableWriter::Upsert(const Steering& s, std::string* error) {
  if (std::string why = ValidateSteering(s); !why.empty()) {
    *error = "tuner table entry: " + why;
    return false;
  }
  uint32_t n = capacity();
  uint32_t free_slot = n;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t id = map_->slots()[i].comm_id.load(std::memory_order_relaxed);
    if (id == s.comm_id) {
      Steering old;
      if (ReadSlot(map_->slots()[i], &old) && old == s) return true;
      WriteSlot(i, s);
      return true;
    }
    if (id == 0 && free_slot == n) free_slot = i;
  }
  if (free_slot == n) {
    *error = "tuner table " + map_->path + " is full (" + std::to_string(n) +
             " communicators)";
    return false;
  }
  WriteSlot(free_slot, s);
  return true;
}

bool TunerTableWriter::Remove(uint64_t comm_id) {
  if (comm_id == 0) return false;
  for (uint32_t i = 0; i < capacity(); ++i) {
    if (map_->slots()[i].comm_id.load(std::memory_order_relaxed) == comm_id) {
      WriteSlot(i, Steering{});
      return true;
    }
  }
  return false;
}

bool TunerTableWriter::Replace(const std::vector<Steering>& entries,
                               std::string* error) {
  for (const Steering& s : entries) {
    if (std::string why = ValidateSteering(s); !why.empty()) {
      *error = "tuner table entry: " + why;
      return false;
    }
  }
  // Remove first, so the slots of communicators no longer steered are free
  // for the new ones.
  for (const Steering& old : Entries()) {
    bool kept = false;
    for (const Steering& s : entries) kept = kept || s.comm_id == old.comm_id;
    if (!kept) Remove(old.comm_id);
  }
  bool ok = true;
  for (const Steering& s : entries) {
    std::string why;
    if (!Upsert(s, &why)) {
      if (ok) *error = why;
      ok = false;
    }
  }
  return ok;
}

std::vector<Steering> TunerTableWriter::Entries() const {
  std::vector<Steering> out;
  for (uint32_t i = 0; i < capacity(); ++i) {
    Steering s;
    if (ReadSlot(map_->slots()[i], &s) && s.comm_id != 0) out.push_back(s);
  }
  return out;
}

// ---- Reader ----------------------------------------------------------------

struct TunerTableReader::Mapping {
  std::string path;
  const void* base = nullptr;
  size_t bytes = 0;
  uint32_t capacity = 0;
  const Header* header() const { return static_cast<const Header*>(base); }
  const Slot* slots() const {
    return Slots(const_cast<void*>(base));  // read-only mapping
  }
  ~Mapping() {
    if (base != nullptr) munmap(const_cast<void*>(base), bytes);
  }
};

std::unique_ptr<TunerTableReader> TunerTableReader::Open(
    const std::string& path_in, std::string* error) {
  std::string path = ResolveTablePath(path_in);
  // O_NONBLOCK: a FIFO at the path must not block NCCL's init.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *error = Errno("cannot open tuner table", path);
    return nullptr;
  }
  // Only a file no other user can write or truncate is mapped: a table of
  // another user, truncated while mapped, raised SIGBUS in every training
  // process of the node (round 21, R21-2).
  if (std::string why = CheckTrustedFile(fd, path); !why.empty()) {
    *error = "tuner table " + why;
    close(fd);
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Header))) {
    *error = "tuner table " + path + " is too small to hold a header";
    close(fd);
    return nullptr;
  }
  auto map = std::make_unique<Mapping>();
  map->path = path;
  map->bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, map->bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *error = Errno("cannot map tuner table", path);
    return nullptr;
  }
  map->base = base;
  const Header* h = map->header();
  if (h->magic.load(std::memory_order_acquire) != kTableMagic) {
    *error = "tuner table " + path + ": bad magic at offset 0";
    return nullptr;
  }
  uint32_t version = h->version.load(std::memory_order_relaxed);
  if (version != kTableVersion) {
    *error = "tuner table " + path + ": version " + std::to_string(version) +
             " at offset 8, this tuner reads " + std::to_string(kTableVersion);
    return nullptr;
  }
  uint32_t capacity = h->capacity.load(std::memory_order_relaxed);
  if (h->header_bytes.load(std::memory_order_relaxed) != sizeof(Header) ||
      h->slot_bytes.load(std::memory_order_relaxed) != sizeof(Slot) ||
      capacity == 0 || capacity > kMaxCapacity ||
      FileBytes(capacity) > map->bytes) {
    *error = "tuner table " + path + ": header sizes at offset 12 do not " +
             "match the file (" + std::to_string(map->bytes) + " bytes)";
    return nullptr;
  }
  map->capacity = capacity;
  return std::unique_ptr<TunerTableReader>(
      new TunerTableReader(std::move(map)));
}

TunerTableReader::TunerTableReader(std::unique_ptr<Mapping> map)
    : map_(std::move(map)) {}
TunerTableReader::~TunerTableReader() = default;

TunerTableReader::Result TunerTableReader::Lookup(uint64_t comm_id,
                                                  Steering* out) const {
  if (comm_id == 0) return Result::kAbsent;
  bool busy = false;
  for (uint32_t i = 0; i < map_->capacity; ++i) {
    const Slot& slot = map_->slots()[i];
    // Cheap filter first; the seqlock read confirms the id.
    uint64_t seq = slot.seq.load(std::memory_order_relaxed);
    if ((seq & 1) == 0 &&
        slot.comm_id.load(std::memory_order_relaxed) != comm_id) {
      continue;
    }
    Steering s;
    if (!ReadSlot(slot, &s)) {
      busy = true;
      continue;
    }
    if (s.comm_id == comm_id) {
      *out = s;
      return Result::kFound;
    }
  }
  return busy ? Result::kBusy : Result::kAbsent;
}

TunerTableReader::Result TunerTableReader::LookupShape(uint32_t n_ranks,
                                                       uint32_t n_nodes,
                                                       Steering* out) const {
  bool busy = false;
  for (uint32_t i = 0; i < map_->capacity; ++i) {
    const Slot& slot = map_->slots()[i];
    if (slot.comm_id.load(std::memory_order_relaxed) == 0 &&
        (slot.seq.load(std::memory_order_relaxed) & 1) == 0) {
      continue;
    }
    Steering s;
    if (!ReadSlot(slot, &s)) {
      busy = true;
      continue;
    }
    if (s.comm_id != 0 && (s.flags & kFlagShapeUnique) != 0 &&
        s.n_ranks == n_ranks && s.n_nodes == n_nodes) {
      *out = s;
      return Result::kFound;
    }
  }
  return busy ? Result::kBusy : Result::kAbsent;
}

std::vector<Steering> TunerTableReader::Entries() const {
  std::vector<Steering> out;
  for (uint32_t i = 0; i < map_->capacity; ++i) {
    Steering s;
    if (ReadSlot(map_->slots()[i], &s) && s.comm_id != 0) out.push_back(s);
  }
  return out;
}

uint64_t TunerTableReader::generation() const {
  return map_->header()->generation.load(std::memory_order_acquire);
}
bool TunerTableReader::retired() const {
  return map_->header()->retired.load(std::memory_order_acquire) != 0;
}
const std::string& TunerTableReader::path() const { return map_->path; }

}  // namespace pitstop::tuner
