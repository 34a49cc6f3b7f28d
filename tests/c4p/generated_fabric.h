// A generated fabric for plan tests ("gen:leafspine,gpus=32,..."): a spec
// that does not parse or generate fails the calling test.
#ifndef PITSTOP_TESTS_CONTROLLER_PLAN_GENERATED_FABRIC_H_
#define PITSTOP_TESTS_CONTROLLER_PLAN_GENERATED_FABRIC_H_

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"

namespace pitstop::c4p {

inline Fabric Gen(const std::string& spec) {
  auto o = ParseGeneratorSpec(spec);
  EXPECT_TRUE(o.ok()) << o.status();
  auto f = GenerateFabric(*o);
  EXPECT_TRUE(f.ok()) << f.status();
  return std::move(*f);
}

}  // namespace pitstop::c4p

#endif  // PITSTOP_TESTS_CONTROLLER_PLAN_GENERATED_FABRIC_H_
