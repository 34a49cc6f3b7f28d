// Several controllers on etcd (docs/ha.md): owns the etcd client, the
// leader election and the fenced etcd store, and connects them to the
// Controller (through LeadershipListener, so this folder does not depend on
// the controller's services). main() builds one when ha.etcd_endpoints is
// set:
//
//   auto ha = HaController::Create(options);
//   controller_options.open_store = [&] { return (*ha)->OpenStore(); };
//   controller_options.leadership = ha->get();
//   ... Controller::Create(controller_options) ...
//   (*ha)->Start(controller);  // campaigns; elected -> BecomeLeader()
#ifndef PITSTOP_CONTROLLER_HA_HA_CONTROLLER_H_
#define PITSTOP_CONTROLLER_HA_HA_CONTROLLER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/config.h"
#include "src/controller/ha/etcd_client.h"
#include "src/controller/ha/etcd_fault_store.h"
#include "src/controller/ha/leader_election.h"
#include "src/controller/ha/leadership.h"

namespace pitstop::controller::ha {

struct HaOptions {
  // Empty: one controller on SQLite (the default).
  std::string etcd_endpoints;
  std::string etcd_prefix = "/pitstop/";
  // The address agents and pitstopctl reach this controller at (followers
  // name it); empty = the listen address.
  std::string advertise;
  uint32_t lease_ttl_s = 2;
  // TLS to etcd (EtcdClient::Options): CA, client certificate and key.
  std::string etcd_ca;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_server_name;
  bool enabled() const { return !etcd_endpoints.empty(); }
  // InvalidArgument naming the key.
  absl::Status Validate(const std::string& listen) const;
};

// "ha.etcd_endpoints" <-> --ha-etcd-endpoints, ...
void RegisterHaOptions(ConfigSchema* schema, HaOptions* o);

// Thread-safe (Leadership's contract); Start/Stop from main().
class HaController final : public Leadership {
 public:
  // `listen` is the controller's listen address (the default advertise).
  static absl::StatusOr<std::unique_ptr<HaController>> Create(
      const HaOptions& options, const std::string& listen);
  ~HaController() override;

  // The fenced etcd store, for Controller::Options::open_store.
  absl::StatusOr<std::unique_ptr<FaultStore>> OpenStore();
  // Campaigns; elected -> listener->BecomeLeader(), deposed -> StepDown().
  void Start(LeadershipListener* listener);
  // Resigns (a follower takes over at once) and stops campaigning.
  void Stop();

  absl::Status CheckLeader() const override;
  // Writes etcd refused because this controller's lease no longer held
  // the leader key (EtcdFaultStore::fenced_writes_refused).
  uint64_t fenced_writes_refused() const;
  void FillStatus(v1::ControllerStatus* status) const override;

  LeaderElection* election() { return election_.get(); }

 private:
  HaController(const HaOptions& options, std::string self,
               std::unique_ptr<EtcdClient> etcd);

  const HaOptions options_;
  const std::string self_;
  std::unique_ptr<EtcdClient> etcd_;
  std::unique_ptr<LeaderElection> election_;
  std::unique_ptr<ElectionFence> fence_;
  EtcdFaultStore* store_ = nullptr;  // owned by the controller
  LeadershipListener* listener_ = nullptr;
};

}  // namespace pitstop::controller::ha

#endif  // PITSTOP_CONTROLLER_HA_HA_CONTROLLER_H_
