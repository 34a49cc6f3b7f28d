// A controller (re)started on one SQLite file in a fresh directory: what
// the durability tests (the trainer settings, the scheduler's naming)
// restart a controller on.
#ifndef PITSTOP_TESTS_CONTROLLER_RESTART_FIXTURE_H_
#define PITSTOP_TESTS_CONTROLLER_RESTART_FIXTURE_H_

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/controller.h"

namespace pitstop::controller::testing {

class RestartFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* t =
        ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("pitstop-" + std::string(t->test_suite_name()) + "-" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A controller (re)started on the same database file.
  std::unique_ptr<Controller> Start() {
    Controller::Options o;
    o.clock = &clock_;
    o.db_path = (dir_ / "pitstop.db").string();
    auto core = Controller::Create(o);
    EXPECT_TRUE(core.ok()) << core.status();
    return core.ok() ? std::move(*core) : nullptr;
  }
  FakeClock clock_;
  std::filesystem::path dir_;
};

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_RESTART_FIXTURE_H_
