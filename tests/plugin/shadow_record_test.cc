// The shadow-iteration record (plugin/shadow_record.h): key hashing, the
// file format, and what a reader refuses.
#include "plugin/shadow_record.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pitstop::plugin {
namespace {

ShadowKey Key() {
  return ShadowKey{.comm_hash = 0x1234abcd5678ef00ull,
                   .seq = 3,
                   .func = ShadowFunc::kAllReduce,
                   .dtype = 7,  // ncclFloat32
                   .op = 0,     // ncclSum
                   .root = -1,
                   .rank = -1,
                   .count = 4};
}

const std::vector<float> kOut = {1.5f, -2.0f, 3.25f, 0.0f};
constexpr uint64_t kBytes = 4 * sizeof(float);

TEST(ShadowKeyTest, HashIsStableAndCoversEveryField) {
  const ShadowKey k = Key();
  EXPECT_EQ(ShadowKeyHash(k), ShadowKeyHash(Key()));
  // Pinned: writer and reader may be different builds.
  EXPECT_EQ(ShadowFileName(k).size(), 16u + 4u);
  EXPECT_EQ(ShadowFileName(k).substr(16), ".rec");
  std::vector<ShadowKey> variants(8, k);
  variants[0].comm_hash ^= 1;
  variants[1].seq += 1;
  variants[2].func = ShadowFunc::kAllGather;
  variants[3].dtype = 8;
  variants[4].op = 1;
  variants[5].root = 0;
  variants[6].rank = 2;
  variants[7].count = 5;
  std::set<uint64_t> hashes = {ShadowKeyHash(k)};
  for (const ShadowKey& v : variants) hashes.insert(ShadowKeyHash(v));
  EXPECT_EQ(hashes.size(), variants.size() + 1);
}

TEST(ShadowKeyTest, OutputSizeAndRankPerFunction) {
  ShadowKey key;
  uint64_t bytes = 0;
  ShadowCall c{ShadowFunc::kAllReduce, 7, 0, -1, 10, nullptr};
  ASSERT_TRUE(ShadowOutput(c, 2, 3, &key, &bytes));
  EXPECT_EQ(bytes, 40u);
  EXPECT_EQ(key.rank, -1);  // every member gets the same
  c.func = ShadowFunc::kAllGather;
  ASSERT_TRUE(ShadowOutput(c, 2, 3, &key, &bytes));
  EXPECT_EQ(bytes, 120u);
  EXPECT_EQ(key.rank, -1);
  c.func = ShadowFunc::kReduceScatter;
  ASSERT_TRUE(ShadowOutput(c, 2, 3, &key, &bytes));
  EXPECT_EQ(bytes, 40u);
  EXPECT_EQ(key.rank, 2);  // each member its own block
  c.func = ShadowFunc::kReduce;
  c.root = 0;
  EXPECT_FALSE(ShadowOutput(c, 2, 3, &key, &bytes));  // off the root
  ASSERT_TRUE(ShadowOutput(c, 0, 3, &key, &bytes));
  EXPECT_EQ(key.root, 0);
  c.dtype = 99;
  EXPECT_FALSE(ShadowOutput(c, 0, 3, &key, &bytes));
}

TEST(ShadowRecordTest, RoundTrip) {
  const std::string file = EncodeShadowRecord(Key(), kOut.data(), kBytes);
  EXPECT_EQ(file.size(), kShadowHeaderBytes + kBytes);
  EXPECT_EQ(file.substr(0, 8), "PSSHAD01");
  std::vector<float> got(4, 9.0f);
  std::string error;
  ASSERT_TRUE(DecodeShadowRecord(file, Key(), got.data(), kBytes, &error))
      << error;
  EXPECT_EQ(got, kOut);
}

TEST(ShadowRecordTest, EveryFlippedBitIsRefusedAndNothingCopied) {
  const std::string good = EncodeShadowRecord(Key(), kOut.data(), kBytes);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    std::vector<float> got(4, 9.0f);
    std::string error;
    EXPECT_FALSE(DecodeShadowRecord(bad, Key(), got.data(), kBytes, &error))
        << "byte " << i;
    EXPECT_FALSE(error.empty());
    EXPECT_EQ(got, std::vector<float>(4, 9.0f)) << "byte " << i;
  }
}

TEST(ShadowRecordTest, CorruptOutputFailsTheChecksum) {
  std::string bad = EncodeShadowRecord(Key(), kOut.data(), kBytes);
  bad.back() ^= 1;
  std::vector<float> got(4);
  std::string error;
  EXPECT_FALSE(DecodeShadowRecord(bad, Key(), got.data(), kBytes, &error));
  EXPECT_NE(error.find("checksum"), std::string::npos) << error;
}

TEST(ShadowRecordTest, WrongSizeOrKeyIsRefused) {
  const std::string file = EncodeShadowRecord(Key(), kOut.data(), kBytes);
  std::vector<float> got(8);
  std::string error;
  EXPECT_FALSE(DecodeShadowRecord(file, Key(), got.data(), 2 * kBytes, &error));
  EXPECT_NE(error.find("16 bytes"), std::string::npos) << error;
  EXPECT_FALSE(DecodeShadowRecord(file.substr(0, file.size() - 1), Key(),
                                  got.data(), kBytes, &error));
  EXPECT_FALSE(
      DecodeShadowRecord(file + "x", Key(), got.data(), kBytes, &error));
  ShadowKey other = Key();
  other.seq = 4;
  EXPECT_FALSE(DecodeShadowRecord(file, other, got.data(), kBytes, &error));
  EXPECT_NE(error.find("another collective"), std::string::npos) << error;
  EXPECT_FALSE(DecodeShadowRecord("", Key(), got.data(), kBytes, &error));
}

TEST(ShadowRecordTest, FilesAreContentAddressedAndWrittenWhole) {
  char tmpl[] = "/tmp/pst-shadow-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::string error;
  ASSERT_TRUE(WriteShadowRecord(dir, Key(), kOut.data(), kBytes, &error))
      << error;
  const std::string path = dir + "/" + ShadowFileName(Key());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes, EncodeShadowRecord(Key(), kOut.data(), kBytes));
  std::vector<float> got(4);
  ASSERT_TRUE(ReadShadowRecord(dir, Key(), got.data(), kBytes, &error))
      << error;
  EXPECT_EQ(got, kOut);
  // A longer file than the call wants is refused, not cut to fit.
  EXPECT_FALSE(ReadShadowRecord(dir, Key(), got.data(), kBytes / 2, &error));
  ShadowKey missing = Key();
  missing.seq = 99;
  EXPECT_FALSE(ReadShadowRecord(dir, missing, got.data(), kBytes, &error));
  EXPECT_NE(error.find(ShadowFileName(missing)), std::string::npos) << error;
  std::remove(path.c_str());
  EXPECT_EQ(rmdir(dir.c_str()), 0) << "a temporary file was left behind";
  EXPECT_FALSE(WriteShadowRecord(dir, Key(), kOut.data(), kBytes, &error));
}

}  // namespace
}  // namespace pitstop::plugin
