// A small client of etcd's v3 gRPC API (our own declarations in
// proto/etcd/): reads, transactions and leases, each call with a deadline.
// Used by the leader election and the etcd fault store.
#ifndef PITSTOP_CONTROLLER_HA_ETCD_CLIENT_H_
#define PITSTOP_CONTROLLER_HA_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/etcd_rpc.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace pitstop::controller::ha {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

// Thread-safe: the stubs are; every method may be called from any thread.
class EtcdClient {
 public:
  struct Options {
    // "host:port" or several IPv4 "a:p,b:q,..." members of one cluster
    // (gRPC picks the first that answers and moves on when it fails).
    std::string endpoints;
    // Deadline of one call: short, so a dead member costs little time.
    absl::Duration timeout = absl::Seconds(1);
    // TLS to etcd (PEM files): with `ca` set the channel uses TLS and
    // verifies etcd's certificate against it; `cert` and `key` (both or
    // neither) are this client's certificate for etcd's
    // --client-cert-auth. Empty: plaintext (etcd on loopback or a trusted
    // network). Read once, at Create. (Initialised so that {endpoints,
    // timeout} stays warning-free.)
    std::string ca = {};
    std::string cert = {};
    std::string key = {};
    // The name etcd's certificate is checked against; empty = the host of
    // the (first) endpoint.
    std::string server_name = {};
  };

  // InvalidArgument naming `endpoints` when it is empty or malformed, or
  // naming the TLS file that cannot be read / is not PEM (or a `cert`
  // without `key`). Does not connect (the first call does).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(Options options);

  // nullopt when the key does not exist.
  absl::StatusOr<std::optional<EtcdKv>> Get(const std::string& key) const;
  // Every key starting with `prefix`, in key order.
  absl::StatusOr<std::vector<EtcdKv>> List(const std::string& prefix) const;
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request) const;
  // A lease of `ttl` (whole seconds, etcd may raise it to its minimum);
  // returns its id, *granted the TTL etcd gave.
  absl::StatusOr<int64_t> Grant(absl::Duration ttl,
                                absl::Duration* granted) const;
  // One keep-alive round trip; returns the TTL left (zero = the lease is
  // gone: expired or revoked).
  absl::StatusOr<absl::Duration> KeepAliveOnce(int64_t lease) const;
  absl::Status Revoke(int64_t lease) const;

  const std::string& endpoints() const { return options_.endpoints; }

  // The range end that makes [prefix, end) cover every key with `prefix`.
  static std::string PrefixEnd(const std::string& prefix);

 private:
  EtcdClient(Options options, std::shared_ptr<grpc::Channel> channel);
  void SetDeadline(grpc::ClientContext* ctx) const;

  const Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
};

}  // namespace pitstop::controller::ha

#endif  // PITSTOP_CONTROLLER_HA_ETCD_CLIENT_H_
