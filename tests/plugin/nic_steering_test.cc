// The interposer's NIC steering (plugin/nic_steering.h) in this process: the
// filtered topology it hands NCCL is a file of its own in $TMPDIR.
#include "plugin/nic_steering.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pitstop/nic_plan.h"

namespace pitstop::plugin {
namespace {

constexpr char kTopo[] = R"(<system version="1">
  <cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:0d:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
      <nic>
        <net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/>
        <net name="mlx5_1" dev="1" speed="400000" port="1" gdr="1"/>
      </nic>
    </pci>
  </cpu>
</system>
)";

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}
std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Round 21, R21-5: the interposer wrote the filtered topology to
// $TMPDIR/pitstop-nccl-topo-PID-N.xml.tmp with std::ofstream (create,
// truncate, follow links), N counting the process's steered creations from
// 0. Another user of the node, who sees the rank's pid, planted a link
// there and had the rank write through it (a file of the rank's user),
// or planted a file of their own and had it truncated and filled. Now the
// file has a name nobody can predict, created exclusively (mode 0600):
// what was planted at the old names stays as it was, and the steering
// still applies.
TEST(InterposerTopologyFileTest, APlantedNameIsNotWrittenThrough) {
  char tmpl[] = "/tmp/pitstop-nic-steering-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string shared = dir + "/tmp";  // like /tmp: sticky, everyone's
  ASSERT_EQ(mkdir(shared.c_str(), 01777), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  const std::string base = dir + "/node-topo.xml";
  WriteText(base, kTopo);
  std::vector<nicplan::NicPlanEntry> plan(1);
  plan[0].comm_id = 0x77;
  plan[0].job = "job1";
  plan[0].n_ranks = 2;
  plan[0].nics = {1};
  std::string error;
  ASSERT_TRUE(nicplan::WriteNicPlan(dir + "/plan", plan, &error)) << error;
  setenv(nicplan::kNicPlanEnv, (dir + "/plan").c_str(), 1);
  setenv(nicplan::kBaseTopoEnv, base.c_str(), 1);
  setenv("TMPDIR", shared.c_str(), 1);
  unsetenv("NCCL_TOPO_FILE");

  // The rank user's own file, and what another user plants at the names
  // of the process's first two creations.
  const std::string victim = dir + "/victim";
  WriteText(victim, "the rank user's file\n");
  const std::string old_name =
      shared + "/pitstop-nccl-topo-" + std::to_string(getpid()) + "-";
  ASSERT_EQ(symlink(victim.c_str(), (old_name + "0.xml.tmp").c_str()), 0);
  WriteText(old_name + "1.xml.tmp", "planted\n");
  if (geteuid() == 0) {  // planted by nobody, as another user would
    ASSERT_EQ(lchown((old_name + "0.xml.tmp").c_str(), 65534, 65534), 0);
    ASSERT_EQ(chown((old_name + "1.xml.tmp").c_str(), 65534, 65534), 0);
  }

  for (int creation = 0; creation < 2; ++creation) {
    NicSteering s = NicSteering::Begin(0x77, 2);
    ASSERT_TRUE(s.applied()) << "creation " << creation;
    const std::string ours = s.topo_file();
    EXPECT_EQ(ours.rfind(shared + "/pitstop-nccl-topo-", 0), 0u) << ours;
    struct stat st;
    ASSERT_EQ(lstat(ours.c_str(), &st), 0) << ours;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << ours;
    EXPECT_EQ(st.st_uid, geteuid()) << ours;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << ours;
    EXPECT_NE(ReadText(ours).find(R"(name="mlx5_0" dev="0" speed="1")"),
              std::string::npos)
        << ReadText(ours);
    const char* env = std::getenv("NCCL_TOPO_FILE");
    ASSERT_NE(env, nullptr);
    EXPECT_EQ(std::string(env), ours);
    s.End(/*in_progress=*/false);
    EXPECT_EQ(std::getenv("NCCL_TOPO_FILE"), nullptr);
    EXPECT_NE(access(ours.c_str(), F_OK), 0) << ours << " left behind";
  }
  EXPECT_EQ(ReadText(victim), "the rank user's file\n");
  EXPECT_EQ(ReadText(old_name + "1.xml.tmp"), "planted\n");
  struct stat st;
  EXPECT_EQ(lstat((old_name + "0.xml.tmp").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  unsetenv(nicplan::kNicPlanEnv);
  unsetenv(nicplan::kBaseTopoEnv);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pitstop::plugin
