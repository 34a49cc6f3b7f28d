#include "src/controller/ha/etcd_client.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pitstop/bounded_file.h"
#include "pitstop/grpc_util.h"

namespace pitstop::controller::ha {
namespace {

bool IsIpv4Endpoint(absl::string_view e) {
  const size_t colon = e.rfind(':');
  if (colon == absl::string_view::npos) return false;
  std::vector<absl::string_view> parts =
      absl::StrSplit(e.substr(0, colon), '.');
  int v = 0;
  if (parts.size() != 4) return false;
  for (absl::string_view p : parts) {
    if (!absl::SimpleAtoi(p, &v) || v < 0 || v > 255) return false;
  }
  return absl::SimpleAtoi(e.substr(colon + 1), &v) && v > 0 && v < 65536;
}

absl::Status Wrap(const grpc::Status& s, absl::string_view what,
                  absl::string_view endpoints) {
  absl::Status st = FromGrpcStatus(s);
  return absl::Status(st.code(), absl::StrCat("etcd ", endpoints, ": ", what,
                                              ": ", st.message()));
}

EtcdKv FromProto(const mvccpb::KeyValue& kv) {
  return EtcdKv{kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(),
                kv.lease()};
}

// The PEM file `path` of option `key`: InvalidArgument naming both when it
// cannot be read or holds no PEM block.
absl::StatusOr<std::string> ReadPem(absl::string_view key,
                                    const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, key);
  if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
  std::string pem = std::move(*text);
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", path, " is not PEM"));
  }
  return pem;
}

// Plaintext without a CA; TLS (with the client certificate when given).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const EtcdClient::Options& o, const std::string& first_endpoint,
    grpc::ChannelArguments* args) {
  if (o.ca.empty()) {
    if (!o.cert.empty() || !o.key.empty()) {
      return absl::InvalidArgumentError(
          "ha.etcd_cert / ha.etcd_key: need ha.etcd_ca (TLS to etcd)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (o.cert.empty() != o.key.empty()) {
    return absl::InvalidArgumentError(
        "ha.etcd_cert and ha.etcd_key: give both or neither");
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = ReadPem("ha.etcd_ca (--ha-etcd-ca)", o.ca);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = std::move(*ca);
  if (!o.cert.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPem("ha.etcd_cert (--ha-etcd-cert)", o.cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPem("ha.etcd_key (--ha-etcd-key)", o.key);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = std::move(*cert);
    ssl.pem_private_key = std::move(*key);
  }
  // Several members form an "ipv4:a,b" target whose authority is not a
  // name etcd's certificate carries: check it against the first member's
  // host (or server_name).
  std::string name = o.server_name;
  if (name.empty()) name = first_endpoint.substr(0, first_endpoint.rfind(':'));
  args->SetSslTargetNameOverride(name);
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    Options options) {
  std::vector<std::string> eps =
      absl::StrSplit(options.endpoints, ',', absl::SkipWhitespace());
  if (eps.empty()) {
    return absl::InvalidArgumentError("etcd_endpoints: empty");
  }
  std::string target = eps[0];
  if (eps.size() > 1) {
    for (const std::string& e : eps) {
      if (!IsIpv4Endpoint(e)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "etcd_endpoints: several members must be IPv4 host:port, got '", e,
            "'"));
      }
    }
    target = absl::StrCat("ipv4:", absl::StrJoin(eps, ","));
  }
  grpc::ChannelArguments args;
  // A member that dies must not stall failover: reconnect quickly (ms).
  // The minimum backoff stays gRPC's (20 s): it is also the connect
  // timeout, and etcd on a loaded host can take more than 100 ms.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Keepalive ping every 2 s, dead after 1 s without an answer (ms).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      Credentials(options, eps[0], &args);
  if (!creds.ok()) return creds.status();
  auto channel = grpc::CreateCustomChannel(target, *creds, args);
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::move(options), std::move(channel)));
}

EtcdClient::EtcdClient(Options options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      kv_(etcdserverpb::KV::NewStub(channel_)),
      lease_(etcdserverpb::Lease::NewStub(channel_)) {}

void EtcdClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(options_.timeout));
}

std::string EtcdClient::PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::optional<EtcdKv>> EtcdClient::Get(
    const std::string& key) const {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  etcdserverpb::RangeResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Range(&ctx, req, &resp);
  if (!s.ok()) return Wrap(s, absl::StrCat("get ", key), options_.endpoints);
  if (resp.kvs_size() == 0) return std::nullopt;
  return FromProto(resp.kvs(0));
}

absl::StatusOr<std::vector<EtcdKv>> EtcdClient::List(
    const std::string& prefix) const {
  etcdserverpb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  etcdserverpb::RangeResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Range(&ctx, req, &resp);
  if (!s.ok()) {
    return Wrap(s, absl::StrCat("list ", prefix), options_.endpoints);
  }
  std::vector<EtcdKv> out;
  out.reserve(resp.kvs_size());
  for (const mvccpb::KeyValue& kv : resp.kvs()) out.push_back(FromProto(kv));
  return out;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request) const {
  etcdserverpb::TxnResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Txn(&ctx, request, &resp);
  if (!s.ok()) return Wrap(s, "txn", options_.endpoints);
  return resp;
}

absl::StatusOr<int64_t> EtcdClient::Grant(absl::Duration ttl,
                                          absl::Duration* granted) const {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = lease_->LeaseGrant(&ctx, req, &resp);
  if (!s.ok()) return Wrap(s, "lease grant", options_.endpoints);
  if (!resp.error().empty()) {
    return absl::UnavailableError(absl::StrCat(
        "etcd ", options_.endpoints, ": lease grant: ", resp.error()));
  }
  if (granted != nullptr) *granted = absl::Seconds(resp.ttl());
  return resp.id();
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAliveOnce(int64_t lease) const {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  auto stream = lease_->LeaseKeepAlive(&ctx);
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse resp;
  const bool ok = stream->Write(req) && stream->Read(&resp);
  stream->WritesDone();
  ctx.TryCancel();
  grpc::Status s = stream->Finish();
  if (!ok) {
    return Wrap(s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                      "stream ended without an answer")
                       : s,
                "lease keep-alive", options_.endpoints);
  }
  return absl::Seconds(resp.ttl());
}

absl::Status EtcdClient::Revoke(int64_t lease) const {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = lease_->LeaseRevoke(&ctx, req, &resp);
  if (!s.ok()) return Wrap(s, "lease revoke", options_.endpoints);
  return absl::OkStatus();
}

}  // namespace pitstop::controller::ha
