// Issue #33, round 23: the hosts a scheduler names for a job
// (SetJobHosts) are durable. A controller restarted on the same SQLite
// file enforces them; they were kept in the leader's memory only, so a
// restart left every job open to any host until named again. Also the
// names and limits a naming is checked against (scheduled_hosts.h). The
// etcd side (a new leader enforces them, a deposed leader's write is
// refused) is in controller_ha_test (ha/job_hosts_ha_test.cc).

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/controller.h"
#include "src/controller/detect/scheduled_hosts.h"
#include "src/controller/store/fault_store.h"
#include "tests/controller/report_comm.h"
#include "tests/controller/restart_fixture.h"

namespace pitstop::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::ReportComm;

class JobHostsTest : public testing::RestartFixture {};

TEST_F(JobHostsTest, ARestartedControllerEnforcesTheNamedHosts) {
  {
    auto core = Start();
    ASSERT_NE(core, nullptr);
    auto named =
        core->ingest().SetJobHosts("good", {"n2", "n1", "n2"}, "slurm");
    ASSERT_TRUE(named.ok()) << named.status();
    EXPECT_THAT(*named, ElementsAre("n1", "n2"));
    ASSERT_TRUE(core->ingest().SetJobHosts("ended", {"n5"}, "slurm").ok());
    ASSERT_TRUE(core->ingest().SetJobHosts("ended", {}, "slurm").ok());
    // A refused naming is not stored.
    EXPECT_TRUE(absl::IsInvalidArgument(
        core->ingest().SetJobHosts("bad", {"n 1"}, "slurm").status()));
  }
  auto core = Start();
  ASSERT_NE(core, nullptr);
  EXPECT_THAT(core->ingest().JobHosts("good"), ElementsAre("n1", "n2"));
  EXPECT_TRUE(core->ingest().JobHosts("ended").empty());
  EXPECT_TRUE(core->ingest().JobHosts("bad").empty());
  // Enforced: a host the scheduler did not name is refused, a named one
  // is taken, and the forgotten job is open to any host again.
  absl::Status s = ReportComm(core.get(), "n3", "good", 0x6001);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("host n3 is not one of"));
  EXPECT_TRUE(ReportComm(core.get(), "n1", "good", 0x6002).ok());
  EXPECT_TRUE(ReportComm(core.get(), "n3", "ended", 0x6003).ok());

  // Forgotten at the job's end, it stays forgotten after a restart.
  ASSERT_TRUE(core->ingest().SetJobHosts("good", {}, "slurm").ok());
  core.reset();
  core = Start();
  ASSERT_NE(core, nullptr);
  EXPECT_TRUE(core->ingest().JobHosts("good").empty());
  EXPECT_TRUE(ReportComm(core.get(), "n3", "good", 0x6004).ok());
}

TEST_F(JobHostsTest, TheStoreRoundTripsDeletesAndRefusesAnEmptyJob) {
  auto store = FaultStore::Open((dir_ / "s.db").string());
  ASSERT_TRUE(store.ok()) << store.status();
  v1::SetJobHostsRequest n;
  n.set_job_id("j1");
  n.add_hosts("a");
  n.add_hosts("b");
  n.set_who("slurm");
  ASSERT_TRUE((*store)->SaveJobHosts(n).ok());
  n.set_job_id("j2");
  ASSERT_TRUE((*store)->SaveJobHosts(n).ok());
  n.set_job_id("");
  EXPECT_TRUE(absl::IsInvalidArgument((*store)->SaveJobHosts(n)));
  v1::SetJobHostsRequest forget;
  EXPECT_TRUE(absl::IsInvalidArgument((*store)->SaveJobHosts(forget)));
  forget.set_job_id("j2");
  ASSERT_TRUE((*store)->SaveJobHosts(forget).ok());
  auto got = (*store)->ScheduledHosts();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_THAT(got->at("j1").hosts(), ElementsAre("a", "b"));
  EXPECT_EQ(got->at("j1").who(), "slurm");
}

// Bad input gets an error naming the field and offset; every limit is
// refused with the number it passed.
TEST(CheckJobHostsTest, RefusesBadNamesNamingTheFieldAndOffset) {
  const ScheduledCounts none;
  auto refused = [&](const std::string& job,
                     const std::vector<std::string>& hosts) {
    absl::StatusOr<std::vector<std::string>> r =
        CheckJobHosts(job, hosts, none);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    return std::string(r.status().message());
  };
  EXPECT_EQ(refused("", {"n1"}), "job_id: required");
  EXPECT_EQ(refused(std::string(257, 'j'), {"n1"}),
            "job_id: 257 bytes, at most 256");
  EXPECT_EQ(refused("jo\nb", {"n1"}),
            "job_id: byte 10 at offset 2 (no control bytes)");
  EXPECT_EQ(refused("j", {"n1", ""}), "hosts[1]: empty");
  EXPECT_EQ(refused("j", {"n1", "n 2"}),
            "hosts[1]: byte 32 at offset 1 (printable ASCII only, no space)");
  EXPECT_EQ(refused("j", {"n\xff"}),
            "hosts[0]: byte 255 at offset 1 (printable ASCII only, no space)");
  EXPECT_EQ(refused("j", {"\x7f"}),
            "hosts[0]: byte 127 at offset 0 (printable ASCII only, no space)");
  EXPECT_EQ(refused("j", {std::string(254, 'h')}),
            "hosts[0]: 254 bytes, at most 253");
  EXPECT_EQ(refused("j", std::vector<std::string>(65537, "h")),
            "hosts: 65537 named, at most 65536");
  // 5,000 names of 253 bytes: 1.2 MiB, more than one etcd value takes.
  std::vector<std::string> long_names;
  for (int i = 0; i < 5000; ++i) {
    long_names.push_back(
        absl::StrCat(i, std::string(253 - 4, 'h')).substr(0, 253));
  }
  EXPECT_THAT(refused("j", long_names),
              HasSubstr("bytes of names, at most 1048576 per job"));
  // UTF-8 job ids are taken; the result is sorted without duplicates.
  auto ok = CheckJobHosts("j\xc3\xa9", {"b", "a", "b"}, none);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(*ok, ElementsAre("a", "b"));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckSchedulerName("sl\x01urm")));
  EXPECT_TRUE(
      absl::IsInvalidArgument(CheckSchedulerName(std::string(257, 'w'))));
  EXPECT_TRUE(CheckSchedulerName("slurm").ok());
}

TEST(CheckJobHostsTest, TheJobAndNameLimitsAreResourceExhausted) {
  // The job table is full: a new job is refused, a named one renamed and
  // any job forgotten.
  ScheduledCounts full{kMaxScheduledJobs, kMaxScheduledJobs, 0};
  auto r = CheckJobHosts("new", {"n1"}, full);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("job-hosts JOB --clear"));
  full.of_job = 1;
  EXPECT_TRUE(CheckJobHosts("named", {"n1", "n2"}, full).ok());
  full.of_job = 0;
  EXPECT_TRUE(CheckJobHosts("new", {}, full).ok());
  // All names: the job's own are given back before its new ones count.
  ScheduledCounts names{2, kMaxScheduledNames - 1, 0};
  EXPECT_TRUE(CheckJobHosts("j", {"a"}, names).ok());
  r = CheckJobHosts("j", {"a", "b"}, names);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("at most 1048576"));
  names.of_job = 1;
  EXPECT_TRUE(CheckJobHosts("j", {"a", "b"}, names).ok());
}

// The engine counts what is named; the controller's SetJobHosts refuses a
// naming beyond the limits before it stores it.
TEST(CheckJobHostsTest, TheEngineCountsJobsAndNames) {
  FakeClock clock;
  auto e = std::move(*DetectionEngine::Create(&clock, {}));
  ASSERT_TRUE(e->SetJobHosts("a", {"n1", "n2"}).ok());
  ASSERT_TRUE(e->SetJobHosts("b", {"n1"}).ok());
  ASSERT_TRUE(e->SetJobHosts("a", {"n3"}).ok());
  EXPECT_EQ(e->stats().scheduled_jobs, 2u);
  EXPECT_EQ(e->stats().scheduled_names, 2u);
  ASSERT_TRUE(e->SetJobHosts("a", {}).ok());
  ASSERT_TRUE(e->SetJobHosts("never-named", {}).ok());
  EXPECT_EQ(e->stats().scheduled_jobs, 1u);
  EXPECT_EQ(e->stats().scheduled_names, 1u);
  EXPECT_TRUE(absl::IsInvalidArgument(e->SetJobHosts("b", {"n\x01"})));
  EXPECT_THAT(e->JobHosts("b"), ElementsAre("n1"));
}

}  // namespace
}  // namespace pitstop::controller
