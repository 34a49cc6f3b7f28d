// The per-node NIC plan (include/pitstop/nic_plan.h): its text format,
// matching a communicator being created, NCCL's commHash of a unique id, and
// the topology XML the interposer hands NCCL.
#include "pitstop/nic_plan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pitstop::nicplan {
namespace {

// Shaped like a topology NCCL dumps (NCCL_TOPO_DUMP_FILE), two NICs per
// PCI switch; the second NIC's tag has no speed.
constexpr char kTopo[] = R"(<system version="1">
  <cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:0c:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:0d:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0.000000" guid="0x1" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
      <pci busid="0000:0e:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_1" dev="1" port="1" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
  <cpu numaid="1" affinity="ffffffff00000000" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:8c:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
      <nic>
        <net name="mlx5_2" dev="2" speed="400000" port="1" gdr="1"/>
        <net name="mlx5_3" dev="3" speed="400000" port="2" gdr="1"/>
      </nic>
    </pci>
  </cpu>
</system>
)";

TEST(NicPlanTest, FormatParsesBackAndBadLinesNameTheLine) {
  std::vector<NicPlanEntry> in(2);
  in[0].comm_id = 0xabcdef0123456789ull;
  in[0].job = "job42";
  in[0].epoch = 3;
  in[0].n_ranks = 16;
  in[0].n_nodes = 2;
  in[0].unique_shape = true;
  in[0].nics = {0, 2};
  in[1].comm_id = 7;
  in[1].n_ranks = 8;
  const std::string text = FormatNicPlan(in);
  std::vector<NicPlanEntry> out;
  std::string error;
  ASSERT_TRUE(ParseNicPlan(text, &out, &error)) << error << "\n" << text;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].comm_id, in[0].comm_id);
  EXPECT_EQ(out[0].job, "job42");
  EXPECT_EQ(out[0].epoch, 3u);
  EXPECT_EQ(out[0].n_ranks, 16);
  EXPECT_EQ(out[0].n_nodes, 2);
  EXPECT_TRUE(out[0].unique_shape);
  EXPECT_EQ(out[0].nics, (std::vector<int>{0, 2}));
  EXPECT_EQ(out[1].job, "");
  EXPECT_TRUE(out[1].nics.empty());

  EXPECT_FALSE(ParseNicPlan("something else\n", &out, &error));
  EXPECT_NE(error.find("line 1"), std::string::npos) << error;
  EXPECT_FALSE(ParseNicPlan(
      "pitstop-nic-plan 1\ncomm 0x1 ranks 4 nics 0\ncomm 0x2 ranks x nics 0\n",
      &out, &error));
  EXPECT_NE(error.find("line 3"), std::string::npos) << error;
  EXPECT_FALSE(
      ParseNicPlan("pitstop-nic-plan 1\ncomm 0x1 nics 0,a\n", &out, &error));
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
}

TEST(NicPlanTest, MatchesByHashThenByAUniqueShapeOfTheJob) {
  std::vector<NicPlanEntry> e(3);
  e[0] = {.comm_id = 0x11,
          .job = "a",
          .n_ranks = 16,
          .unique_shape = true,
          .nics = {1}};
  e[1] = {.comm_id = 0x22,
          .job = "a",
          .n_ranks = 8,
          .unique_shape = false,
          .nics = {2}};
  e[2] = {.comm_id = 0x33,
          .job = "a",
          .n_ranks = 8,
          .unique_shape = false,
          .nics = {3}};
  EXPECT_EQ(MatchNicPlan(e, "a", 0x22, 8), &e[1]);  // hash wins
  EXPECT_EQ(MatchNicPlan(e, "a", 0x99, 16), &e[0]);
  EXPECT_EQ(MatchNicPlan(e, "", 0, 16), &e[0]);     // job unknown
  EXPECT_EQ(MatchNicPlan(e, "b", 0, 16), nullptr);  // another job's
  EXPECT_EQ(MatchNicPlan(e, "a", 0, 8), nullptr);   // ambiguous
  EXPECT_EQ(MatchNicPlan(e, "a", 0, 4), nullptr);
}

TEST(NicPlanTest, CommHashIsNcclsGetHashOfTheUniqueId) {
  // DJB2a over the bytes: h = h * 33 ^ c from 5381.
  char id[128];
  std::memset(id, 0, sizeof(id));
  uint64_t want = 5381;
  for (int i = 0; i < 128; ++i) want = want * 33;
  EXPECT_EQ(CommHashOfUniqueId(id, 128), want);
  id[0] = 'a';
  EXPECT_EQ(CommHashOfUniqueId(id, 1), (5381ull * 33) ^ 'a');
}

TEST(NicPlanTest, FilterDemotesTheNicsOutsideThePlan) {
  std::string out, error;
  std::vector<std::string> kept;
  ASSERT_TRUE(FilterTopologyXml(kTopo, {0, 2}, &out, &kept, &error)) << error;
  EXPECT_EQ(kept, (std::vector<std::string>{"mlx5_0", "mlx5_2"}));
  EXPECT_NE(out.find(R"(name="mlx5_0" dev="0" speed="400000")"),
            std::string::npos);
  EXPECT_NE(out.find(R"(<net speed="1" name="mlx5_1" dev="1")"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(R"(name="mlx5_2" dev="2" speed="400000")"),
            std::string::npos);
  EXPECT_NE(out.find(R"(name="mlx5_3" dev="3" speed="1" port="2")"),
            std::string::npos)
      << out;
  // Everything else is byte for byte the same.
  EXPECT_EQ(out.size(), std::strlen(kTopo) + std::strlen(" speed=\"1\"") -
                            (std::strlen("400000") - 1));
  // No planned NIC in the file, or no <net> at all: untouched, an error.
  EXPECT_FALSE(FilterTopologyXml(kTopo, {7}, &out, &kept, &error));
  EXPECT_NE(error.find("none of the planned NICs"), std::string::npos);
  EXPECT_FALSE(FilterTopologyXml("<system/>", {0}, &out, &kept, &error));
  // Without dev attributes, the order of the <net>s is the index.
  const std::string nodev =
      R"(<system><nic><net name="a" speed="100"/><net name="b" speed="100"/></nic></system>)";
  ASSERT_TRUE(FilterTopologyXml(nodev, {1}, &out, &kept, &error)) << error;
  EXPECT_EQ(kept, (std::vector<std::string>{"b"}));
  EXPECT_NE(out.find(R"(<net name="a" speed="1"/>)"), std::string::npos) << out;
}

// A directory of this test's own (::testing::TempDir() is /tmp, where a
// plan of a user other than root is not trusted).
std::string OwnDir() {
  char tmpl[] = "/tmp/pitstop-nic-plan-XXXXXX";
  return mkdtemp(tmpl) != nullptr ? std::string(tmpl) : std::string();
}

TEST(NicPlanTest, WriteReplacesTheFileWhole) {
  const std::string dir = OwnDir();
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/nic-plan";
  std::vector<NicPlanEntry> e(1);
  e[0].comm_id = 5;
  e[0].nics = {1};
  std::string error;
  ASSERT_TRUE(WriteNicPlan(path, e, &error)) << error;
  e[0].nics = {0, 1};
  ASSERT_TRUE(WriteNicPlan(path, e, &error)) << error;
  std::vector<NicPlanEntry> got;
  ASSERT_TRUE(ReadNicPlan(path, &got, &error)) << error;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].nics, (std::vector<int>{0, 1}));
  unlink(path.c_str());
  EXPECT_FALSE(ReadNicPlan(path, &got, &error));
  EXPECT_NE(error.find(path), std::string::npos);
  EXPECT_FALSE(WriteNicPlan("/proc/no-such-dir/plan", e, &error));
  rmdir(dir.c_str());
}

// Round 21, R21-2: the interposer reads the plan inside every communicator
// creation of every process on the node. A FIFO there blocked each of them
// (forever, or while its writer fed them without end), and any user could
// put a plan in /dev/shm to demote other jobs' NICs. Refused now: special
// files, files other users may write or another user owns there, and
// files over kMaxNicPlanBytes.
TEST(NicPlanTest, APlanAnotherUserCouldWriteIsNotRead) {
  const std::string dir = OwnDir();
  ASSERT_FALSE(dir.empty());
  std::vector<NicPlanEntry> e(1), got;
  e[0].comm_id = 5;
  e[0].nics = {1};
  std::string error;
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_FALSE(ReadNicPlan(fifo, &got, &error));
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;

  const std::string path = dir + "/plan";
  ASSERT_TRUE(WriteNicPlan(path, e, &error)) << error;
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  EXPECT_FALSE(ReadNicPlan(path, &got, &error));
  EXPECT_NE(error.find("writable by other users"), std::string::npos) << error;
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_TRUE(ReadNicPlan(path, &got, &error)) << error;

  std::string shared = "/dev/shm";
  if (geteuid() == 0) {  // root's sticky directory, a plan of nobody's
    shared = dir + "/shm";
    ASSERT_EQ(mkdir(shared.c_str(), 01777), 0);
  }
  const std::string foreign =
      shared + "/pitstop-test-plan-" + std::to_string(getpid());
  ASSERT_TRUE(WriteNicPlan(foreign, e, &error)) << error;
  if (geteuid() == 0) {
    ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  }
  EXPECT_FALSE(ReadNicPlan(foreign, &got, &error));
  EXPECT_NE(error.find("neither root nor the owner"), std::string::npos)
      << error;
  unlink(foreign.c_str());

  // A plan too large to be one: read no further than the bound.
  {
    std::string text = FormatNicPlan(e);
    text.resize(kMaxNicPlanBytes + 1, '#');
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  EXPECT_FALSE(ReadNicPlan(path, &got, &error));
  EXPECT_NE(error.find("larger than"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pitstop::nicplan
