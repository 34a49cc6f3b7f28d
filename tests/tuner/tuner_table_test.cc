// The per-node tuner table: layout checks, writer/reader round trips,
// replacement of a table under its readers, and a concurrent writer and
// reader that must never see a torn entry.
#include "pitstop/tuner_table.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::tuner {
namespace {

using ::testing::HasSubstr;
using Result = TunerTableReader::Result;

class TunerTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pitstop-tuner-table-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/table";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<TunerTableWriter> NewWriter(uint32_t capacity = 8) {
    std::string error;
    auto w = TunerTableWriter::Create(path_, capacity, &error);
    EXPECT_NE(w, nullptr) << error;
    return w;
  }
  std::unique_ptr<TunerTableReader> NewReader() {
    std::string error;
    auto r = TunerTableReader::Open(path_, &error);
    EXPECT_NE(r, nullptr) << error;
    return r;
  }

  std::string dir_;
  std::string path_;
};

Steering Entry(uint64_t id, int max_channels) {
  Steering s;
  s.comm_id = id;
  s.plan_epoch = 7;
  s.n_ranks = 16;
  s.n_nodes = 2;
  s.max_channels = max_channels;
  s.algo_mask = 1u << kAlgoRing;
  return s;
}

TEST_F(TunerTableTest, ReaderSeesWhatTheWriterWrote) {
  auto w = NewWriter();
  auto r = NewReader();
  Steering out;
  EXPECT_EQ(r->Lookup(0xabc, &out), Result::kAbsent);
  std::string error;
  ASSERT_TRUE(w->Upsert(Entry(0xabc, 4), &error)) << error;
  uint64_t gen = r->generation();
  ASSERT_EQ(r->Lookup(0xabc, &out), Result::kFound);
  EXPECT_EQ(out, Entry(0xabc, 4));
  EXPECT_EQ(r->Lookup(0xdef, &out), Result::kAbsent);

  ASSERT_TRUE(w->Upsert(Entry(0xabc, 2), &error));
  EXPECT_GT(r->generation(), gen);
  ASSERT_EQ(r->Lookup(0xabc, &out), Result::kFound);
  EXPECT_EQ(out.max_channels, 2);
  EXPECT_TRUE(w->Remove(0xabc));
  EXPECT_FALSE(w->Remove(0xabc));
  EXPECT_EQ(r->Lookup(0xabc, &out), Result::kAbsent);
}

TEST_F(TunerTableTest, UnchangedUpsertDoesNotBumpTheGeneration) {
  auto w = NewWriter();
  std::string error;
  ASSERT_TRUE(w->Upsert(Entry(1, 4), &error));
  uint64_t gen = w->generation();
  ASSERT_TRUE(w->Upsert(Entry(1, 4), &error));
  EXPECT_EQ(w->generation(), gen);
}

TEST_F(TunerTableTest, ReplaceKeepsExactlyTheListedEntries) {
  auto w = NewWriter(4);
  auto r = NewReader();
  std::string error;
  ASSERT_TRUE(w->Replace({Entry(1, 4), Entry(2, 4), Entry(3, 4)}, &error));
  // 1 goes, 2 changes, 3 stays, 4 and 5 come: 4 slots hold it because the
  // removal happens first.
  ASSERT_TRUE(
      w->Replace({Entry(2, 2), Entry(3, 4), Entry(4, 1), Entry(5, 1)}, &error))
      << error;
  Steering out;
  EXPECT_EQ(r->Lookup(1, &out), Result::kAbsent);
  ASSERT_EQ(r->Lookup(2, &out), Result::kFound);
  EXPECT_EQ(out.max_channels, 2);
  EXPECT_EQ(r->Lookup(5, &out), Result::kFound);
  EXPECT_EQ(w->Entries().size(), 4u);
  EXPECT_EQ(r->Entries(), w->Entries());
  // Full: the fifth new one does not fit.
  EXPECT_FALSE(w->Replace(
      {Entry(2, 2), Entry(3, 4), Entry(4, 1), Entry(5, 1), Entry(6, 1)},
      &error));
  EXPECT_THAT(error, HasSubstr("full"));
}

TEST_F(TunerTableTest, InvalidEntriesAreRefusedAndChangeNothing) {
  auto w = NewWriter();
  std::string error;
  ASSERT_TRUE(w->Upsert(Entry(1, 4), &error));
  Steering bad = Entry(0, 4);
  EXPECT_FALSE(w->Upsert(bad, &error));
  EXPECT_THAT(error, HasSubstr("comm_id 0"));
  bad = Entry(2, 2);
  bad.min_channels = 3;
  EXPECT_FALSE(w->Replace({bad}, &error));
  EXPECT_THAT(error, HasSubstr("min_channels"));
  bad = Entry(2, 2);
  bad.algo_mask = 1u << 9;
  EXPECT_FALSE(w->Upsert(bad, &error));
  ASSERT_EQ(w->Entries().size(), 1u);
  EXPECT_EQ(w->Entries()[0], Entry(1, 4));
}

TEST_F(TunerTableTest, ShapeLookupNeedsTheUniqueFlag) {
  auto w = NewWriter();
  auto r = NewReader();
  std::string error;
  ASSERT_TRUE(w->Upsert(Entry(1, 4), &error));
  Steering out;
  EXPECT_EQ(r->LookupShape(16, 2, &out), Result::kAbsent);
  Steering unique = Entry(1, 4);
  unique.flags = kFlagShapeUnique;
  ASSERT_TRUE(w->Upsert(unique, &error));
  ASSERT_EQ(r->LookupShape(16, 2, &out), Result::kFound);
  EXPECT_EQ(out.comm_id, 1u);
  EXPECT_EQ(r->LookupShape(16, 4, &out), Result::kAbsent);
}

TEST_F(TunerTableTest, ANewWriterRetiresTheOldTable) {
  auto w1 = NewWriter();
  std::string error;
  ASSERT_TRUE(w1->Upsert(Entry(1, 4), &error));
  auto r = NewReader();
  EXPECT_FALSE(r->retired());
  auto w2 = NewWriter();  // the agent restarted
  EXPECT_TRUE(r->retired());
  Steering out;
  EXPECT_EQ(r->Lookup(1, &out), Result::kFound);  // the old mapping
  auto r2 = NewReader();
  EXPECT_FALSE(r2->retired());
  EXPECT_EQ(r2->Lookup(1, &out), Result::kAbsent);  // the new, empty table
}

TEST_F(TunerTableTest, OpenErrorsNameThePath) {
  std::string error;
  EXPECT_EQ(TunerTableReader::Open(path_, &error), nullptr);
  EXPECT_THAT(error, HasSubstr(path_));
  {
    std::ofstream f(path_);
    f << std::string(200, 'x');
  }
  EXPECT_EQ(TunerTableReader::Open(path_, &error), nullptr);
  EXPECT_THAT(error, HasSubstr("bad magic"));
  std::ofstream(path_, std::ios::trunc) << "short";
  EXPECT_EQ(TunerTableReader::Open(path_, &error), nullptr);
  EXPECT_THAT(error, HasSubstr("too small"));
  EXPECT_EQ(TunerTableWriter::Create(path_, 0, &error), nullptr);
  EXPECT_EQ(TunerTableWriter::Create(dir_ + "/no/such/dir/t", 4, &error),
            nullptr);
  EXPECT_THAT(error, HasSubstr("no/such/dir"));
}

// Round 21, R21-2: any user on the node could create the table in the
// world-writable /dev/shm before the agent's first plan; every training
// process mapped it, was steered by it, and got SIGBUS at its next
// collective once that user truncated it. A table another user owns there,
// one other users may write, or a FIFO (which blocked NCCL's init) is not
// opened.
TEST_F(TunerTableTest, ATableAnotherUserCouldWriteIsNotMapped) {
  std::string error;
  // A table other users may write (and truncate).
  NewWriter();
  ASSERT_EQ(chmod(path_.c_str(), 0666), 0);
  EXPECT_EQ(TunerTableReader::Open(path_, &error), nullptr);
  EXPECT_THAT(error, HasSubstr("writable by other users (mode 0666)"));
  ASSERT_EQ(chmod(path_.c_str(), 0644), 0);
  EXPECT_NE(NewReader(), nullptr);  // the agent's own: read as before

  // Another user's table in a directory any user may create files in: as
  // root, a sticky world-writable directory of root's and a table chowned
  // to nobody; as another user, /dev/shm (root's) and a table of ours.
  std::string shared = "/dev/shm";
  if (geteuid() == 0) {
    shared = dir_ + "/shm";
    ASSERT_EQ(mkdir(shared.c_str(), 01777), 0);
  }
  const std::string foreign =
      shared + "/pitstop-test-table-" + std::to_string(getpid());
  {
    auto w = TunerTableWriter::Create(foreign, 4, &error);
    ASSERT_NE(w, nullptr) << error;
    ASSERT_TRUE(w->Upsert(Entry(1, 1), &error)) << error;
  }
  if (geteuid() == 0) {
    ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  }
  EXPECT_EQ(TunerTableReader::Open(foreign, &error), nullptr);
  EXPECT_THAT(error, HasSubstr("neither root nor the owner of " + shared));
  unlink(foreign.c_str());

  // A FIFO: refused at once instead of blocking the open.
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(TunerTableReader::Open(fifo, &error), nullptr);
  EXPECT_THAT(error, HasSubstr("not a regular file"));
}

TEST_F(TunerTableTest, PathComesFromTheEnvironmentWhenNotGiven) {
  setenv(kTableEnv, path_.c_str(), 1);
  EXPECT_EQ(ResolveTablePath(""), path_);
  EXPECT_EQ(ResolveTablePath("/x"), "/x");
  unsetenv(kTableEnv);
  EXPECT_EQ(ResolveTablePath(""), kDefaultTablePath);
}

// A writer rewrites one entry as fast as it can; every field derives from
// one counter, so a reader that mixed two writes sees fields that disagree.
// The reader maps the file separately, as the tuner in another process
// does.
TEST_F(TunerTableTest, ConcurrentReaderNeverSeesATornEntry) {
  auto w = NewWriter(4);
  auto r = NewReader();
  auto make = [](uint32_t k) {
    Steering s;
    s.comm_id = 0x1000 + (k % 2);  // the slot also changes owner
    s.plan_epoch = uint64_t{k} << 20 | k;
    s.n_ranks = k;
    s.n_nodes = k ^ 0x5555;
    s.max_channels = static_cast<int32_t>(k % 1000) + 1;
    s.min_channels = static_cast<int32_t>(k % 1000) + 1;
    s.algo_mask = k & 0x7f;
    s.proto_mask = (k >> 7) & 0x7;
    s.flags = k;
    return s;
  };
  constexpr uint32_t kWrites = 100000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::string error;
    for (uint32_t k = 1; k <= kWrites; ++k) {
      ASSERT_TRUE(w->Replace({make(k)}, &error)) << error;
    }
    done = true;
  });
  uint64_t found = 0, torn = 0;
  while (!done.load()) {
    for (uint64_t id : {0x1000ull, 0x1001ull}) {
      Steering s;
      if (r->Lookup(id, &s) != Result::kFound) continue;
      ++found;
      if (!(s == make(s.n_ranks))) ++torn;
    }
  }
  writer.join();
  EXPECT_EQ(torn, 0u);
  // The end state is the last write (also when the reader found nothing in
  // flight on a machine where the writer ran alone).
  Steering last;
  ASSERT_EQ(r->Lookup(make(kWrites).comm_id, &last), Result::kFound);
  EXPECT_EQ(last, make(kWrites));
  RecordProperty("entries_read", std::to_string(found));
}

// A writer that stopped half-way through an entry (the slot's sequence is
// odd, as the agent leaves it if it dies mid-write) must not hand out the
// half-written entry: the reader says busy and the tuner keeps NCCL's
// defaults. Written through a third mapping at the documented offsets.
TEST_F(TunerTableTest, HalfWrittenEntryIsBusyNotRead) {
  auto w = NewWriter(4);
  auto r = NewReader();
  std::string error;
  ASSERT_TRUE(w->Upsert(Entry(0x77, 4), &error));
  int fd = open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint64_t seq = 0;
  constexpr off_t kSlot0 = 64;  // header bytes; seq is a slot's first word
  ASSERT_EQ(pread(fd, &seq, 8, kSlot0), 8);
  EXPECT_EQ(seq % 2, 0u);
  uint64_t odd = seq + 1;
  ASSERT_EQ(pwrite(fd, &odd, 8, kSlot0), 8);
  int32_t half = 99;  // max_channels at slot offset 32
  ASSERT_EQ(pwrite(fd, &half, 4, kSlot0 + 32), 4);
  Steering out;
  EXPECT_EQ(r->Lookup(0x77, &out), Result::kBusy);
  uint64_t even = seq + 2;
  ASSERT_EQ(pwrite(fd, &even, 8, kSlot0), 8);
  ASSERT_EQ(r->Lookup(0x77, &out), Result::kFound);
  EXPECT_EQ(out.max_channels, 99);
  close(fd);
}

}  // namespace
}  // namespace pitstop::tuner
