// Cora-style effective NIC capacity: what a NIC actually moves, learned from
// the proxy ops of the collectives that cross it, and used by the planner as
// the capacity of that NIC's links.
//
// One sample per (collective, NIC): the bytes of the NIC's connections over
// the time they took (the longest proxy op among them: they run together).
// A proxy op's duration also holds waiting for peers, so single samples
// under-read the NIC; the estimate therefore follows the upper envelope:
// samples above it pull it up fast (alpha_up), samples below pull it down
// slowly (alpha_down), so only a NIC that is slow collective after
// collective loses capacity. Small transfers (latency-bound) give no
// sample, and idle time gives none either: the estimate does not decay
// while a NIC is quiet. Estimates never exceed the nominal speed.
//
// Thread-compatible.
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_NIC_CAPACITY_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_NIC_CAPACITY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/c4p/fabric.h"

namespace pitstop::c4p {

class NicCapacityModel {
 public:
  struct Options {
    double alpha_up = 0.5;
    double alpha_down = 0.15;
    uint64_t min_bytes = 1 << 20;   // smaller transfers are latency-bound
    uint64_t min_busy_ns = 100000;  // 100 us
    int warmup = 3;                 // samples before the estimate is used
  };
  NicCapacityModel() : NicCapacityModel(Options{}) {}
  explicit NicCapacityModel(Options options) : options_(options) {}

  // `nic` names the NIC as the fabric does ("host3/nic2").
  void Observe(const std::string& nic, double nominal_gbps, uint64_t bytes,
               uint64_t busy_ns);

  struct Estimate {
    double nominal_gbps = 0;
    double gbps = 0;  // nominal until warm
    int samples = 0;
  };
  // Nominal (and samples 0) for an unknown NIC.
  Estimate Get(const std::string& nic, double nominal_gbps) const;

  // Sets the capacity of every known NIC's links in `fabric` to its
  // estimate; returns the links whose capacity changed by more than
  // `min_change` of nominal (what a re-plan takes).
  std::vector<int> ApplyTo(Fabric* fabric, double min_change = 0.05) const;

 private:
  struct State {
    double nominal_gbps = 0;
    double gbps = 0;
    int samples = 0;
  };
  Options options_;
  std::map<std::string, State> nics_;
};

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_NIC_CAPACITY_H_
