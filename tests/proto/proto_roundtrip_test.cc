// Round-trips the v1 API messages through the wire format and checks the
// conventions every message relies on (zero enum values are UNSPECIFIED).
#include <string>

#include "gtest/gtest.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "pitstop/v1/telemetry.pb.h"

namespace pitstop {
namespace {

template <typename M>
M RoundTrip(const M& in) {
  std::string wire;
  EXPECT_TRUE(in.SerializeToString(&wire));
  M out;
  EXPECT_TRUE(out.ParseFromString(wire));
  return out;
}

TEST(ProtoRoundTripTest, TelemetryBatch) {
  v1::StreamTelemetryRequest req;
  req.mutable_hello()->set_host("node-3");
  req.mutable_hello()->set_pid(4242);
  req.set_batch_seq(7);
  auto* comm = req.add_communicators();
  comm->set_kind(v1::CommunicatorEvent::KIND_INIT);
  comm->mutable_info()->set_comm_hash(0xdeadbeefcafef00dULL);
  for (int r : {0, 8, 16, 24}) comm->mutable_info()->add_global_ranks(r);
  auto* op = req.add_ops();
  op->set_op_id(99);
  op->set_func(v1::COLL_FUNC_ALL_REDUCE);
  op->set_seq_number(123456789012ULL);
  op->set_enqueue_start_cpu_ns(1'000'000'000'123ULL);
  auto* kc = req.add_kernel_channels();
  kc->set_op_id(99);
  kc->set_start_gpu_ns(1ULL << 62);
  req.mutable_drops()->set_ring_full(5);

  const v1::StreamTelemetryRequest out = RoundTrip(req);
  EXPECT_EQ(out.hello().host(), "node-3");
  EXPECT_EQ(out.communicators(0).info().comm_hash(), 0xdeadbeefcafef00dULL);
  EXPECT_EQ(out.communicators(0).info().global_ranks_size(), 4);
  EXPECT_EQ(out.communicators(0).info().global_ranks(3), 24);
  EXPECT_EQ(out.ops(0).seq_number(), 123456789012ULL);
  EXPECT_EQ(out.kernel_channels(0).start_gpu_ns(), 1ULL << 62);
  EXPECT_EQ(out.drops().ring_full(), 5u);
}

TEST(ProtoRoundTripTest, AgentSummaryAndCommand) {
  v1::ConnectRequest req;
  req.mutable_registration()->set_host("node-1");
  auto* nic = req.mutable_registration()->add_nics();
  nic->set_name("mlx5_0");
  nic->set_kind(v1::NicInfo::KIND_INFINIBAND);
  auto* s = req.add_summaries();
  s->set_comm_hash(1);
  s->set_rank(3);
  s->set_kernel_duration_ns(1'500'000);
  auto* c = s->add_connections();
  c->set_peer_rank(4);
  c->set_throughput_bps(12.5e9);
  const v1::ConnectRequest out = RoundTrip(req);
  EXPECT_EQ(out.registration().nics(0).kind(), v1::NicInfo::KIND_INFINIBAND);
  EXPECT_EQ(out.summaries(0).kernel_duration_ns(), 1'500'000u);
  EXPECT_DOUBLE_EQ(out.summaries(0).connections(0).throughput_bps(), 12.5e9);

  v1::ConnectResponse resp;
  auto* cmd = resp.add_commands();
  cmd->set_command_id(5);
  cmd->mutable_set_activation_mask()->set_event_mask(0x10);
  const v1::ConnectResponse resp_out = RoundTrip(resp);
  ASSERT_EQ(resp_out.commands(0).command_case(),
            v1::AgentCommand::kSetActivationMask);
  EXPECT_EQ(resp_out.commands(0).set_activation_mask().event_mask(), 0x10u);
}

TEST(ProtoRoundTripTest, FaultWithEvidence) {
  v1::Fault f;
  f.set_fault_id("f-1");
  f.set_fault_class(v1::FAULT_CLASS_NON_COMM_HANG);
  auto* s = f.add_suspects();
  s->set_level(v1::SUSPECT_LEVEL_RANK);
  s->set_global_rank(12);
  auto* e = f.add_evidence();
  e->set_text("ranks 12 never enqueued all_to_all #41");
  (*e->mutable_values())["missing_ranks"] = 2;
  const v1::Fault out = RoundTrip(f);
  EXPECT_EQ(out.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(out.suspects(0).global_rank(), 12);
  EXPECT_DOUBLE_EQ(out.evidence(0).values().at("missing_ranks"), 2);
}

TEST(ProtoConventionsTest, EnumZeroIsUnspecified) {
  const google::protobuf::EnumDescriptor* enums[] = {
      v1::ClockDomain_descriptor(),  v1::CollFunc_descriptor(),
      v1::DataType_descriptor(),     v1::Algorithm_descriptor(),
      v1::Protocol_descriptor(),     v1::OpKind_descriptor(),
      v1::SuspectLevel_descriptor(), v1::FaultClass_descriptor(),
      v1::FaultState_descriptor(),   v1::NodeState_descriptor(),
      v1::PolicyMode_descriptor(),   v1::OpState_descriptor(),
  };
  for (const auto* e : enums) {
    ASSERT_NE(e->FindValueByNumber(0), nullptr) << e->full_name();
    EXPECT_NE(e->FindValueByNumber(0)->name().find("_UNSPECIFIED"),
              std::string::npos)
        << e->full_name();
  }
}

TEST(ProtoConventionsTest, PackageIsVersioned) {
  EXPECT_EQ(v1::Fault::descriptor()->file()->package(), "pitstop.v1");
  EXPECT_EQ(v1::StreamTelemetryRequest::descriptor()->file()->package(),
            "pitstop.v1");
}

TEST(ProtoConventionsTest, EveryRpcHasItsOwnRequestAndResponse) {
  const google::protobuf::FileDescriptor* files[] = {
      v1::StreamTelemetryRequest::descriptor()->file(),
      v1::ConnectRequest::descriptor()->file(),
      v1::GetStatusRequest::descriptor()->file(),
  };
  for (const auto* file : files) {
    for (int s = 0; s < file->service_count(); ++s) {
      const auto* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        const auto* method = service->method(m);
        EXPECT_EQ(method->input_type()->name(), method->name() + "Request")
            << method->full_name();
        EXPECT_EQ(method->output_type()->name(), method->name() + "Response")
            << method->full_name();
      }
    }
  }
}

}  // namespace
}  // namespace pitstop
