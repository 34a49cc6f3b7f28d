// The per-node tuner table: how a flow plan reaches NCCL's tuner
// (docs/planning.md, "How a plan reaches NCCL").
//
// The node agent writes, per communicator whose path the controller's plan
// says is degraded, a steering entry: a cap (and floor) on the channel count
// and the algorithms / protocols NCCL may pick. libnccl-tuner-pitstop.so,
// loaded by NCCL inside every training process on the node, reads it in
// getCollInfo and steers exactly the communicators the table names; any
// other communicator keeps NCCL's own choice.
//
// Transport: one file in shared memory (default kDefaultTablePath, in the
// agent's /run/pitstop beside its sockets; both sides honour
// $PITSTOP_TUNER_TABLE), fixed layout, native endianness, readable by every
// user on the node (0644): the tuner runs in the user's container, which
// must see the agent's /run/pitstop (or the path it names). A reader maps
// only a file CheckTrustedFile accepts: in a world-writable directory such
// as /dev/shm any user could place a table there first, steer every job's
// NCCL and, truncating it, kill every process mapping it (SIGBUS).
//
//   header (64 bytes): magic, version, header/slot sizes, capacity,
//                      generation (bumped after every change), retired
//   slots (64 bytes each): a seqlock sequence (odd while being written)
//                      and the entry's fields, every field an atomic word
//
// A reader never sees a torn entry: it reads a slot's sequence, the fields,
// then the sequence again and retries (a bounded number of times; then it
// reports "busy" and the tuner keeps NCCL's defaults for that call). It
// never blocks and never writes the file. When the agent restarts it builds
// a new file and renames it over the path, after marking the old one
// retired; a reader that sees `retired` reopens the path.
//
// This library links only libc and libstdc++ (no Abseil, gRPC or
// Protobuf): the tuner .so that uses it must load in any user container.
// Errors come back as strings for that reason, not absl::Status.
#ifndef PITSTOP_TUNER_TABLE_H_
#define PITSTOP_TUNER_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pitstop::tuner {

inline constexpr char kTableEnv[] = "PITSTOP_TUNER_TABLE";
inline constexpr char kDefaultTablePath[] = "/run/pitstop/tuner-table";
inline constexpr uint32_t kTableVersion = 1;
inline constexpr uint32_t kDefaultCapacity = 256;
inline constexpr uint32_t kMaxCapacity = 65536;

// NCCL's algorithm and protocol indices (the collCostTable's rows and
// columns; ../shared/docs/nccl-plugin-abi.md sec. 15).
enum Algo : uint32_t {
  kAlgoTree = 0,
  kAlgoRing = 1,
  kAlgoCollNetDirect = 2,
  kAlgoCollNetChain = 3,
  kAlgoNvls = 4,
  kAlgoNvlsTree = 5,
  kAlgoPat = 6,
};
inline constexpr int kNumAlgos = 7;
enum Proto : uint32_t {
  kProtoLl = 0,
  kProtoLl128 = 1,
  kProtoSimple = 2,
};
inline constexpr int kNumProtos = 3;

// Entry flags.
// kShapeUnique: no other communicator the agent knows on this node has this
// entry's (n_ranks, n_nodes); only then may a tuner that is not told the
// communicator id (tuner ABI v4, NCCL 2.24-2.27) match by that shape.
inline constexpr uint32_t kFlagShapeUnique = 1u << 0;

// The steering of one communicator.
struct Steering {
  // NCCL's commHash: the commId the tuner's init gets (v5+) and the comm
  // hash the profiler reports. Never 0.
  uint64_t comm_id = 0;
  // Epoch of the controller's plan this entry comes from.
  uint64_t plan_epoch = 0;
  uint32_t n_ranks = 0;  // the communicator's shape (for v4 matching)
  uint32_t n_nodes = 0;
  int32_t max_channels = 0;  // 0: no cap
  int32_t min_channels = 0;  // 0: no floor
  uint32_t algo_mask = 0;    // bit a set: algorithm a allowed; 0: all
  uint32_t proto_mask = 0;   // bit p set: protocol p allowed; 0: all
  uint32_t flags = 0;        // kFlag*

  bool operator==(const Steering&) const = default;
};

// Empty string if `s` is a valid entry, else why not.
std::string ValidateSteering(const Steering& s);

// The agent's side. Owns the file: Create builds a fresh table and renames
// it over `path` (marking a table already there retired, so its readers
// reopen); the destructor leaves the file (readers keep the last plan; the
// next agent replaces it). Not thread-safe: one thread at a time (the agent
// serialises directives); any number of readers in other processes.
class TunerTableWriter {
 public:
  // Path: `path`, else $PITSTOP_TUNER_TABLE, else kDefaultTablePath.
  // Returns null and sets *error on failure (naming the path and errno).
  static std::unique_ptr<TunerTableWriter> Create(const std::string& path,
                                                  uint32_t capacity,
                                                  std::string* error);
  ~TunerTableWriter();
  TunerTableWriter(const TunerTableWriter&) = delete;
  TunerTableWriter& operator=(const TunerTableWriter&) = delete;

  // Adds or replaces the entry of s.comm_id. False (and *error) when the
  // entry is invalid or the table is full.
  bool Upsert(const Steering& s, std::string* error);
  // Removes the entry of comm_id; false if there was none.
  bool Remove(uint64_t comm_id);
  // Makes the table hold exactly `entries` (a directive lists the whole
  // node's steering). Entries that did not change are not rewritten. On an
  // invalid entry nothing changes; when full, as many as fit are written.
  bool Replace(const std::vector<Steering>& entries, std::string* error);
  // The entries now in the table, in slot order.
  std::vector<Steering> Entries() const;
  uint64_t generation() const;
  uint32_t capacity() const;
  const std::string& path() const;

  struct Mapping;  // implementation detail

 private:
  explicit TunerTableWriter(std::unique_ptr<Mapping> map);
  void WriteSlot(uint32_t slot, const Steering& s);
  std::unique_ptr<Mapping> map_;
};

// The tuner's side: maps the file read-only. Thread-safe (NCCL may call
// getCollInfo of several communicators from several threads): every method
// only reads the mapping. Lock-free, no allocation, no syscalls except in
// Open.
class TunerTableReader {
 public:
  // Path as for the writer. Returns null and sets *error when the file is
  // missing, too small, or not a table of this version.
  static std::unique_ptr<TunerTableReader> Open(const std::string& path,
                                                std::string* error);
  ~TunerTableReader();
  TunerTableReader(const TunerTableReader&) = delete;
  TunerTableReader& operator=(const TunerTableReader&) = delete;

  enum class Result { kFound, kAbsent, kBusy };
  // The entry of comm_id. kBusy: a writer kept the slot changing through
  // every retry (the caller keeps its defaults this time).
  Result Lookup(uint64_t comm_id, Steering* out) const;
  // The entry with kFlagShapeUnique and this shape (tuner ABI v4).
  Result LookupShape(uint32_t n_ranks, uint32_t n_nodes, Steering* out) const;
  // Every entry now in the table, in slot order (for tools and tests; it
  // allocates). Slots that stayed busy through every retry are left out.
  std::vector<Steering> Entries() const;
  // Bumped by the writer after every change: a caller may cache a lookup
  // until it moves.
  uint64_t generation() const;
  // The agent replaced this file: reopen the path.
  bool retired() const;
  const std::string& path() const;

  struct Mapping;  // implementation detail

 private:
  explicit TunerTableReader(std::unique_ptr<Mapping> map);
  std::unique_ptr<Mapping> map_;
};

// `path` if non-empty, else $PITSTOP_TUNER_TABLE if set, else the default.
std::string ResolveTablePath(const std::string& path);

// Empty if the file open at `fd` (named `path`) may be trusted by every
// training process on the node, else why not: it must be a regular file
// that no user but its owner can write, owned by root or by the owner of
// its directory (in a directory any user may create files in, such as
// /dev/shm, another user's file is refused). The tuner table and the NIC
// plan are read only after this check (docs/reliability.md, round 21).
std::string CheckTrustedFile(int fd, const std::string& path);

}  // namespace pitstop::tuner

#endif  // PITSTOP_TUNER_TABLE_H_
