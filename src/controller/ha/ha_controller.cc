#include "src/controller/ha/ha_controller.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "pitstop/address.h"
#include "pitstop/logging.h"

namespace pitstop::controller::ha {

absl::Status HaOptions::Validate(const std::string& listen) const {
  if (!enabled()) return absl::OkStatus();
  if (etcd_prefix.empty() || etcd_prefix.front() != '/') {
    return absl::InvalidArgumentError(
        "ha.etcd_prefix (--ha-etcd-prefix): must start with '/'");
  }
  if (lease_ttl_s < 1 || lease_ttl_s > 60) {
    return absl::InvalidArgumentError(
        "ha.lease_ttl_s (--ha-lease-ttl-s): must be 1..60");
  }
  for (absl::string_view ep : absl::StrSplit(etcd_endpoints, ',')) {
    if (absl::Status s =
            ValidateAddress(absl::StripAsciiWhitespace(ep),
                            "ha.etcd_endpoints (--ha-etcd-endpoints)")
                .status();
        !s.ok()) {
      return s;
    }
  }
  if (!advertise.empty()) {
    if (absl::Status s =
            ValidateAddress(advertise, "ha.advertise (--ha-advertise)",
                            {.allow_port_zero = true})
                .status();
        !s.ok()) {
      return s;
    }
  }
  const std::string& self = advertise.empty() ? listen : advertise;
  if (absl::StartsWith(self, "0.0.0.0:") || absl::StartsWith(self, "[::]:") ||
      absl::EndsWith(self, ":0")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ha.advertise (--ha-advertise): followers name the leader by its "
        "address; set the host:port agents reach this controller at (listen "
        "is '",
        listen, "')"));
  }
  return absl::OkStatus();
}

void RegisterHaOptions(ConfigSchema* s, HaOptions* o) {
  s->Add("ha.etcd_endpoints", &o->etcd_endpoints,
         "several controllers: etcd members (host:port, comma-separated "
         "IPv4 for several); the leader is elected on etcd and faults, "
         "acknowledgements, drains and policies live there (fenced by the "
         "leader lease); empty = one controller on SQLite (db)");
  s->Add("ha.etcd_prefix", &o->etcd_prefix,
         "etcd key prefix of this cluster's controllers");
  s->Add("ha.advertise", &o->advertise,
         "host:port agents and pitstopctl reach this controller at; "
         "followers send it to clients as the leader; empty = listen");
  s->Add("ha.etcd_ca", &o->etcd_ca,
         "TLS to etcd: CA certificate (PEM) etcd's certificate is checked "
         "against; empty = plaintext (etcd on loopback or a trusted "
         "network)");
  s->Add("ha.etcd_cert", &o->etcd_cert,
         "TLS to etcd: this controller's client certificate (PEM), for "
         "etcd's --client-cert-auth; with ha.etcd_key");
  s->Add("ha.etcd_key", &o->etcd_key,
         "TLS to etcd: the client certificate's private key (PEM)");
  s->Add("ha.etcd_server_name", &o->etcd_server_name,
         "TLS to etcd: the name etcd's certificate must carry; empty = the "
         "host of the first endpoint");
  s->Add("ha.lease_ttl_s", &o->lease_ttl_s,
         "leader lease TTL (s): a dead leader is replaced after about this "
         "long (etcd raises it to its minimum, 2 s with default timings)");
}

absl::StatusOr<std::unique_ptr<HaController>> HaController::Create(
    const HaOptions& options, const std::string& listen) {
  if (absl::Status s = options.Validate(listen); !s.ok()) return s;
  EtcdClient::Options eo;
  eo.endpoints = options.etcd_endpoints;
  eo.ca = options.etcd_ca;
  eo.cert = options.etcd_cert;
  eo.key = options.etcd_key;
  eo.server_name = options.etcd_server_name;
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create(eo);
  if (!etcd.ok()) return etcd.status();
  // Fail at start, not at the first write, when etcd is unreachable.
  if (absl::StatusOr<std::optional<EtcdKv>> probe =
          (*etcd)->Get(absl::StrCat(options.etcd_prefix, "leader"));
      !probe.ok()) {
    return absl::UnavailableError(
        absl::StrCat("ha.etcd_endpoints: ", probe.status().message()));
  }
  return std::unique_ptr<HaController>(new HaController(
      options, options.advertise.empty() ? listen : options.advertise,
      std::move(*etcd)));
}

HaController::HaController(const HaOptions& options, std::string self,
                           std::unique_ptr<EtcdClient> etcd)
    : options_(options), self_(std::move(self)), etcd_(std::move(etcd)) {
  LeaderElection::Options lo;
  lo.key = absl::StrCat(options_.etcd_prefix, "leader");
  lo.self = self_;
  lo.ttl = absl::Seconds(options_.lease_ttl_s);
  lo.on_elected = [this]() -> absl::Status {
    return listener_ == nullptr ? absl::FailedPreconditionError("no controller")
                                : listener_->BecomeLeader();
  };
  lo.on_lost = [this](const std::string& why) {
    if (listener_ != nullptr) listener_->StepDown(why);
  };
  election_ = std::make_unique<LeaderElection>(etcd_.get(), std::move(lo));
  fence_ = std::make_unique<ElectionFence>(election_.get());
}

HaController::~HaController() { Stop(); }

absl::StatusOr<std::unique_ptr<FaultStore>> HaController::OpenStore() {
  auto store = std::make_unique<EtcdFaultStore>(etcd_.get(), fence_.get(),
                                                options_.etcd_prefix);
  store_ = store.get();
  return std::unique_ptr<FaultStore>(std::move(store));
}

void HaController::Start(LeadershipListener* listener) {
  listener_ = listener;
  Logger("ha")->info("campaigning on etcd {} as {} (lease ttl {} s)",
                     etcd_->endpoints(), self_, options_.lease_ttl_s);
  election_->Start();
}

void HaController::Stop() {
  if (election_ != nullptr) election_->Stop(/*resign=*/true);
}

absl::Status HaController::CheckLeader() const {
  if (election_->IsLeader()) return absl::OkStatus();
  const std::string leader = election_->Leader();
  if (leader.empty() || leader == self_) {
    return absl::UnavailableError(
        absl::StrCat("controller ", self_,
                     " is not the leader and no leader is elected "
                     "yet; retry shortly"));
  }
  return absl::UnavailableError(
      absl::StrCat("controller ", self_, " is a follower; leader=", leader));
}

uint64_t HaController::fenced_writes_refused() const {
  return store_ == nullptr ? 0 : store_->fenced_writes_refused();
}

void HaController::FillStatus(v1::ControllerStatus* status) const {
  status->set_role(election_->IsLeader() ? v1::CONTROLLER_ROLE_LEADER
                                         : v1::CONTROLLER_ROLE_FOLLOWER);
  status->set_leader(election_->Leader());
  status->set_fenced_writes_refused(
      store_ == nullptr ? 0 : store_->fenced_writes_refused());
  status->set_leader_terms_won(election_->terms_won());
}

}  // namespace pitstop::controller::ha
