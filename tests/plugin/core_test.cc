// Unit tests of the library's parts: the SPSC ring under two threads, the
// hand-written wire encoding (decoded with the generated classes), the
// response decoder, event-mask parsing, the comm registry's masks.
#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/v1/telemetry.pb.h"
#include "plugin/comm_registry.h"
#include "plugin/config.h"
#include "plugin/packer.h"
#include "plugin/ring.h"
#include "plugin/wire.h"

namespace pitstop::plugin {
namespace {

TEST(RingTest, TwoThreadsDeliverInOrderOrCountDrops) {
  Ring ring(256, 0);
  constexpr uint64_t kN = 200000;
  std::atomic<bool> done{false};
  uint64_t dropped = 0;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      Record* r = ring.Reserve();
      if (r == nullptr) {
        ++dropped;
        continue;
      }
      r->type = RecordType::kCompletion;
      r->completion.op_id = i;
      ring.Publish();
    }
    done = true;
  });
  uint64_t received = 0, last = 0;
  bool ordered = true;
  auto consume = [&](const Record& r) {
    if (received > 0 && r.completion.op_id <= last) ordered = false;
    last = r.completion.op_id;
    ++received;
  };
  for (;;) {
    const bool finished = done.load();
    ring.Drain(64, consume);
    if (finished && ring.published() == received) break;
  }
  producer.join();
  EXPECT_TRUE(ordered);
  EXPECT_EQ(received + dropped, kN);
  EXPECT_EQ(ring.full_drops(), dropped);
  EXPECT_EQ(ring.published(), received);
}

// Records sized to what they carry: one-unit (completion, kernel channel)
// and two-unit (op, proxy op) records interleaved across many wraps of a
// small ring, with two threads; every record arrives whole and in order.
TEST(RingTest, MixedRecordSizesWrapWhole) {
  Ring ring(4, 0);  // 8 units: at most 4 two-unit or 8 one-unit records
  constexpr uint64_t kN = 20000;
  std::atomic<bool> done{false};
  uint64_t dropped = 0;
  auto type_of = [](uint64_t i) {
    switch (i % 4) {
      case 0:
        return RecordType::kOp;
      case 1:
        return RecordType::kCompletion;
      case 2:
        return RecordType::kProxyOp;
      default:
        return RecordType::kKernelCh;
    }
  };
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      Record* r = ring.Reserve();
      if (r == nullptr) {
        ++dropped;
        --i;  // retry the same record: the order check needs them all
        std::this_thread::yield();
        continue;
      }
      r->type = type_of(i);
      switch (r->type) {
        case RecordType::kOp:
          r->op.op_id = i;
          r->op.enqueue_stop_cpu_ns = ~i;  // last field: the second unit
          break;
        case RecordType::kProxyOp:
          r->proxy_op.op_id = i;
          r->proxy_op.gpu_wait_ns = ~i;
          break;
        case RecordType::kCompletion:
          r->completion.op_id = i;
          break;
        default:
          r->kernel.op_id = i;
          r->kernel.stop_cpu_ns = ~i;
      }
      ring.Publish();
    }
    done = true;
  });
  uint64_t next = 0;
  bool ok = true;
  auto consume = [&](const Record& r) {
    if (r.type != type_of(next)) ok = false;
    switch (r.type) {
      case RecordType::kOp:
        ok &= r.op.op_id == next && r.op.enqueue_stop_cpu_ns == ~next;
        break;
      case RecordType::kProxyOp:
        ok &= r.proxy_op.op_id == next && r.proxy_op.gpu_wait_ns == ~next;
        break;
      case RecordType::kCompletion:
        ok &= r.completion.op_id == next;
        break;
      default:
        ok &= r.kernel.op_id == next && r.kernel.stop_cpu_ns == ~next;
    }
    ++next;
  };
  while (!done.load() || next < kN) {
    if (ring.Drain(3, consume) == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_TRUE(ok);
  EXPECT_EQ(next, kN);
  EXPECT_EQ(ring.published(), kN);
  EXPECT_EQ(ring.full_drops(), dropped);
  EXPECT_EQ(ring.capacity(), 4u);
}

TEST(RingSetTest, EachThreadGetsItsOwnRingUntilNoneLeft) {
  RingSet set(2, 16);
  Ring* main_ring = set.ThreadRing();
  ASSERT_NE(main_ring, nullptr);
  EXPECT_EQ(set.ThreadRing(), main_ring);
  Ring* other = nullptr;
  Ring* third = main_ring;
  std::thread([&] { other = set.ThreadRing(); }).join();
  std::thread([&] { third = set.ThreadRing(); }).join();
  EXPECT_NE(other, nullptr);
  EXPECT_NE(other, main_ring);
  EXPECT_EQ(third, nullptr);
  EXPECT_EQ(set.no_ring_drops(), 1u);
}

TEST(WireTest, RecordsDecodeWithGeneratedClasses) {
  std::string batch, scratch;
  Record op{};
  op.type = RecordType::kOp;
  op.op.op_id = 77;
  op.op.comm_hash = 0xABCDEF0123456789ull;
  op.op.rank = 3;
  op.op.seq_number = 9;
  op.op.count = 100;
  op.op.root = -1;
  op.op.peer = -1;
  op.op.func = "ReduceScatter";
  op.op.datatype = "ncclFloat16";
  op.op.algo = "NVLS_TREE";
  op.op.proto = "LL128";
  op.op.n_channels = 4;
  op.op.graph_replay = 1;
  op.op.enqueue_start_cpu_ns = 5;
  PackRecord(op, &batch, &scratch);
  Record step{};
  step.type = RecordType::kProxyStep;
  step.proxy_step.op_id = 77;
  step.proxy_step.proxy_index = 2;
  step.proxy_step.bytes = 1 << 20;
  step.proxy_step.state_cpu_ns[kStepRecvFlushWait] = 123;
  PackRecord(step, &batch, &scratch);
  Record net{};
  net.type = RecordType::kNetPlugin;
  net.net.transport = 2;
  net.net.socket_fd = 17;
  net.net.device = -1;
  PackRecord(net, &batch, &scratch);
  ProtoWriter w(&batch);
  Drops d;
  d.ring_full = 4;
  d.events_recorded = 1000;
  w.Message(kReqDrops, EncodeDrops(d));
  w.Message(kReqGoodbye, EncodeGoodbye(kGoodbyeExit, 99));
  CommEvent ev;
  ev.kind = kCommAbort;
  ev.info.comm_hash = 5;
  ev.info.global_ranks = {-1, 12};
  ev.info.source = CommInfo::kInterposer;
  w.Message(kReqCommunicators, EncodeCommEvent(ev));

  v1::StreamTelemetryRequest req;
  ASSERT_TRUE(req.ParseFromString(batch));
  ASSERT_EQ(req.ops_size(), 1);
  const auto& o = req.ops(0);
  EXPECT_EQ(o.op_id(), 77u);
  EXPECT_EQ(o.comm_hash(), 0xABCDEF0123456789ull);
  EXPECT_EQ(o.rank(), 3);
  EXPECT_EQ(o.root(), -1);
  EXPECT_EQ(o.func(), v1::COLL_FUNC_REDUCE_SCATTER);
  EXPECT_EQ(o.datatype(), v1::DATA_TYPE_FLOAT16);
  EXPECT_EQ(o.bytes(), 200u);
  EXPECT_EQ(o.algorithm(), v1::ALGORITHM_NVLS_TREE);
  EXPECT_EQ(o.protocol(), v1::PROTOCOL_LL128);
  EXPECT_EQ(o.kind(), v1::OP_KIND_COLLECTIVE);
  EXPECT_TRUE(o.graph_replay());
  EXPECT_FALSE(o.graph_captured());
  ASSERT_EQ(req.proxy_steps_size(), 1);
  EXPECT_EQ(req.proxy_steps(0).recv_flush_wait_cpu_ns(), 123u);
  EXPECT_EQ(req.proxy_steps(0).bytes(), 1u << 20);
  ASSERT_EQ(req.net_events_size(), 1);
  EXPECT_EQ(req.net_events(0).transport(),
            v1::NetPluginRecord::TRANSPORT_SOCKET);
  EXPECT_EQ(req.net_events(0).socket_fd(), 17);
  EXPECT_EQ(req.net_events(0).device(), -1);
  EXPECT_EQ(req.drops().ring_full(), 4u);
  EXPECT_EQ(req.goodbye().reason(), v1::ProcessGoodbye::REASON_EXIT);
  ASSERT_EQ(req.communicators_size(), 1);
  EXPECT_EQ(req.communicators(0).kind(), v1::CommunicatorEvent::KIND_ABORT);
  EXPECT_THAT(req.communicators(0).info().global_ranks(),
              ::testing::ElementsAre(-1, 12));
  EXPECT_EQ(req.communicators(0).info().cuda_device(), -1);
  EXPECT_EQ(req.communicators(0).info().source(),
            v1::CommunicatorInfo::SOURCE_INTERPOSER);
}

TEST(WireTest, UnknownStringsMapToOther) {
  EXPECT_EQ(MapFunc("Frobnicate"), v1::COLL_FUNC_OTHER);
  EXPECT_EQ(MapFunc(nullptr), v1::COLL_FUNC_UNSPECIFIED);
  EXPECT_EQ(MapDataType("Unknown"), v1::DATA_TYPE_OTHER);
  EXPECT_EQ(MapAlgorithm("Unknown"), v1::ALGORITHM_OTHER);
  EXPECT_EQ(MapProtocol("SIMPLE"), v1::PROTOCOL_SIMPLE);
  EXPECT_EQ(DataTypeSize("ncclBfloat16"), 2u);
}

TEST(WireTest, DecodesActivationCommands) {
  v1::StreamTelemetryResponse resp;
  auto* a = resp.add_activation();
  a->set_comm_hash(0xFFFFFFFFFFFFFFFFull);
  a->set_event_mask(0x5E);
  a->set_duration_ms(30000);
  a->set_command_id(42);
  resp.add_activation();  // all defaults
  AgentMessages out;
  ASSERT_TRUE(DecodeResponse(resp.SerializeAsString(), &out));
  ASSERT_EQ(out.activations.size(), 2u);
  EXPECT_EQ(out.activations[0].comm_hash, 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(out.activations[0].event_mask, 0x5Eu);
  EXPECT_EQ(out.activations[0].duration_ms, 30000u);
  EXPECT_EQ(out.activations[0].command_id, 42u);
  EXPECT_EQ(out.activations[1].event_mask, 0u);
  out = AgentMessages();
  EXPECT_FALSE(DecodeResponse(std::string("\x0a\x05\x08", 3), &out));
}

v1::RankMigrationDirective FullDirective() {
  v1::RankMigrationDirective d;
  d.set_phase(v1::RankMigrationDirective::PHASE_SWITCH_AT);
  d.set_migration_id("M7");
  d.set_epoch(3);
  d.set_role(v1::RankMigrationDirective::ROLE_LEAVER);
  d.set_global_rank(-1);
  for (int i = 0; i < 2; ++i) {
    auto* c = d.add_comms();
    c->set_old_comm_hash(0xFEDCBA9876543210ull + i);
    c->set_new_comm_id(std::string(128, static_cast<char>('a' + i)));
  }
  d.set_switch_comm_hash(0xFEDCBA9876543210ull);
  d.set_switch_seq(1234);
  d.set_transfer_comm_id(std::string(128, '\x80'));
  d.set_reason("why");
  return d;
}

// proto3 leaves rank 0 off the wire; the decoder must read it as 0 (a -1
// default made rank 0 answer as rank -1 and its agent wait forever).
TEST(WireTest, DirectiveForRankZeroDecodesAsRankZero) {
  v1::StreamTelemetryResponse resp;
  v1::RankMigrationDirective d = FullDirective();
  d.set_global_rank(0);
  *resp.add_migration_directive() = d;
  AgentMessages out;
  ASSERT_TRUE(DecodeResponse(resp.SerializeAsString(), &out));
  ASSERT_EQ(out.directives.size(), 1u);
  EXPECT_EQ(out.directives[0].global_rank, 0);
}

TEST(WireTest, DecodesMigrationDirectivesWithGeneratedBytes) {
  v1::StreamTelemetryResponse resp;
  *resp.add_migration_directive() = FullDirective();
  resp.add_activation()->set_event_mask(2);
  AgentMessages out;
  ASSERT_TRUE(DecodeResponse(resp.SerializeAsString(), &out));
  ASSERT_EQ(out.directives.size(), 1u);
  EXPECT_EQ(out.activations.size(), 1u);
  EXPECT_EQ(out.malformed_directives, 0u);
  const MigrationDirective& d = out.directives[0];
  EXPECT_EQ(d.phase, kPhaseSwitchAt);
  EXPECT_EQ(d.migration_id, "M7");
  EXPECT_EQ(d.epoch, 3u);
  EXPECT_EQ(d.role, kRoleLeaver);
  EXPECT_EQ(d.global_rank, -1);
  ASSERT_EQ(d.comms.size(), 2u);
  EXPECT_EQ(d.comms[1].old_comm_hash, 0xFEDCBA9876543211ull);
  EXPECT_EQ(d.comms[1].new_comm_id, std::string(128, 'b'));
  EXPECT_EQ(d.switch_comm_hash, 0xFEDCBA9876543210ull);
  EXPECT_EQ(d.switch_seq, 1234u);
  EXPECT_EQ(d.transfer_comm_id, std::string(128, '\x80'));
  EXPECT_EQ(d.reason, "why");
  EXPECT_FALSE(d.from_replica);
}

// A node-failure migration's flag (field 12) reaches the rebuilder.
TEST(WireTest, DecodesFromReplica) {
  v1::RankMigrationDirective d = FullDirective();
  d.set_role(v1::RankMigrationDirective::ROLE_STAYER);
  d.set_from_replica(true);
  v1::StreamTelemetryResponse resp;
  *resp.add_migration_directive() = d;
  AgentMessages out;
  ASSERT_TRUE(DecodeResponse(resp.SerializeAsString(), &out));
  ASSERT_EQ(out.directives.size(), 1u);
  EXPECT_TRUE(out.directives[0].from_replica);
  EXPECT_EQ(out.directives[0].transfer_comm_id, std::string(128, '\x80'));
}

// Unusable directives are skipped and counted; the frame (and the
// activation next to them) still counts.
TEST(WireTest, MalformedDirectivesAreCountedNotFatal) {
  std::vector<v1::RankMigrationDirective> bad(5, FullDirective());
  bad[0].set_phase(v1::RankMigrationDirective::PHASE_UNSPECIFIED);
  bad[1].clear_role();
  bad[2].mutable_comms(0)->set_new_comm_id("short");
  bad[3].set_transfer_comm_id(std::string(127, 'x'));
  bad[4].clear_migration_id();
  v1::StreamTelemetryResponse resp;
  for (const auto& d : bad) *resp.add_migration_directive() = d;
  resp.add_activation()->set_event_mask(2);
  std::string bytes = resp.SerializeAsString();
  // A sixth directive whose body is not protobuf at all: a field tag of
  // wire type 7.
  bytes += std::string("\x12\x02\x0f\x01", 4);
  AgentMessages out;
  ASSERT_TRUE(DecodeResponse(bytes, &out));
  EXPECT_TRUE(out.directives.empty());
  EXPECT_EQ(out.malformed_directives, 6u);
  EXPECT_EQ(out.activations.size(), 1u);
}

// MAKE_IDS names the communicators by their old hash only: the library
// makes their ids, so a comm without one is usable there and nowhere else.
TEST(WireTest, DecodesMakeIdsDirectivesWhoseCommsHaveNoIds) {
  v1::RankMigrationDirective d = FullDirective();
  d.set_phase(v1::RankMigrationDirective::PHASE_MAKE_IDS);
  d.set_role(v1::RankMigrationDirective::ROLE_JOINER);
  d.set_make_comm_ids(true);
  d.clear_transfer_comm_id();
  for (auto& c : *d.mutable_comms()) c.clear_new_comm_id();
  v1::RankMigrationDirective prepare = d;
  prepare.set_phase(v1::RankMigrationDirective::PHASE_PREPARE);
  v1::StreamTelemetryResponse resp;
  *resp.add_migration_directive() = d;
  *resp.add_migration_directive() = prepare;
  AgentMessages out;
  ASSERT_TRUE(DecodeResponse(resp.SerializeAsString(), &out));
  EXPECT_EQ(out.malformed_directives, 1u) << "a PREPARE without new ids";
  ASSERT_EQ(out.directives.size(), 1u);
  const MigrationDirective& got = out.directives[0];
  EXPECT_EQ(got.phase, kPhaseMakeIds);
  EXPECT_EQ(got.role, kRoleJoiner);
  EXPECT_TRUE(got.make_comm_ids);
  ASSERT_EQ(got.comms.size(), 2u);
  EXPECT_EQ(got.comms[1].old_comm_hash, 0xFEDCBA9876543211ull);
  EXPECT_TRUE(got.transfer_comm_id.empty());
  // make_comm_ids is false unless set.
  d.set_make_comm_ids(false);
  resp.Clear();
  *resp.add_migration_directive() = d;
  out = AgentMessages();
  ASSERT_TRUE(DecodeResponse(resp.SerializeAsString(), &out));
  ASSERT_EQ(out.directives.size(), 1u);
  EXPECT_FALSE(out.directives[0].make_comm_ids);
}

TEST(WireTest, MadeIdsInAcksDecodeWithGeneratedClasses) {
  MigrationAck a;
  a.migration_id = "M7";
  a.epoch = 3;
  a.phase = kPhaseMakeIds;
  a.ok = true;
  a.global_rank = 2;
  a.made_comms.push_back({0xFEDCBA9876543210ull, std::string(128, 'a')});
  a.made_comms.push_back({7, std::string(128, '\0')});
  a.made_transfer_id = std::string(128, '\x80');
  std::string bytes;
  ProtoWriter w(&bytes);
  w.Message(kReqMigrationAcks, EncodeMigrationAck(a));
  v1::StreamTelemetryRequest req;
  ASSERT_TRUE(req.ParseFromString(bytes));
  ASSERT_EQ(req.migration_acks_size(), 1);
  const v1::RankMigrationAck& got = req.migration_acks(0);
  EXPECT_EQ(got.phase(), v1::RankMigrationDirective::PHASE_MAKE_IDS);
  EXPECT_TRUE(got.ok());
  ASSERT_EQ(got.made_comms_size(), 2);
  EXPECT_EQ(got.made_comms(0).old_comm_hash(), 0xFEDCBA9876543210ull);
  EXPECT_EQ(got.made_comms(0).new_comm_id(), std::string(128, 'a'));
  EXPECT_EQ(got.made_comms(1).old_comm_hash(), 7u);
  EXPECT_EQ(got.made_comms(1).new_comm_id(), std::string(128, '\0'));
  EXPECT_EQ(got.made_transfer_id(), std::string(128, '\x80'));
  // And the other way: what the generated class writes, the writer wrote.
  EXPECT_EQ(got.SerializeAsString(), EncodeMigrationAck(a));
}

TEST(WireTest, MigrationAcksDecodeWithGeneratedClasses) {
  MigrationAck a{"M7", 3, kPhasePrepare, true, "", 2, 500, {}, ""};
  MigrationAck b{"M7", 3, kPhaseSwitchAt, false, "too late", -1, 0, {}, ""};
  std::string bytes;
  ProtoWriter w(&bytes);
  w.Message(kReqMigrationAcks, EncodeMigrationAck(a));
  w.Message(kReqMigrationAcks, EncodeMigrationAck(b));
  v1::StreamTelemetryRequest req;
  ASSERT_TRUE(req.ParseFromString(bytes));
  ASSERT_EQ(req.migration_acks_size(), 2);
  EXPECT_EQ(req.migration_acks(0).migration_id(), "M7");
  EXPECT_EQ(req.migration_acks(0).epoch(), 3u);
  EXPECT_EQ(req.migration_acks(0).phase(),
            v1::RankMigrationDirective::PHASE_PREPARE);
  EXPECT_TRUE(req.migration_acks(0).ok());
  EXPECT_EQ(req.migration_acks(0).global_rank(), 2);
  EXPECT_EQ(req.migration_acks(0).progress_seq(), 500u);
  EXPECT_FALSE(req.migration_acks(1).ok());
  EXPECT_EQ(req.migration_acks(1).error(), "too late");
  EXPECT_EQ(req.migration_acks(1).global_rank(), -1);
}

TEST(ConfigTest, ParsesEventMasks) {
  uint32_t m = 0;
  EXPECT_TRUE(ParseEventMask("0x4e", &m));
  EXPECT_EQ(m, 0x4Eu);
  EXPECT_TRUE(ParseEventMask("78", &m));
  EXPECT_EQ(m, 78u);
  EXPECT_TRUE(ParseEventMask("Coll|p2p, KernelCh", &m));
  EXPECT_EQ(m, 0x2u | 0x4u | 0x40u);
  EXPECT_FALSE(ParseEventMask("0x100", &m));  // GroupApi: not supported
  EXPECT_FALSE(ParseEventMask("coll|", &m));
  EXPECT_FALSE(ParseEventMask("12abc", &m));
  EXPECT_FALSE(ParseEventMask("", &m));
}

TEST(CommRegistryTest, NcclMaskIsTheUnionAndRevertsAfterDuration) {
  CommRegistry reg(kDefaultEventMask, kDefaultDeepEventMask);
  int nccl_mask = 0;
  CommInfo a, b;
  a.comm_hash = 1;
  a.n_ranks = 2;
  b.comm_hash = 2;
  b.n_ranks = 2;
  CommContext* ca = reg.Add(a, &nccl_mask, 100);
  CommContext* cb = reg.Add(b, &nccl_mask, 100);
  EXPECT_EQ(nccl_mask, static_cast<int>(kDefaultEventMask));
  reg.Apply({.comm_hash = 2, .event_mask = 0x5E, .duration_ms = 1}, 1000);
  EXPECT_EQ(cb->mask.load(), 0x5Eu);
  EXPECT_EQ(ca->mask.load(), kDefaultEventMask);
  EXPECT_EQ(nccl_mask, 0x5E);
  reg.ExpireActivations(1000 + 999999);
  EXPECT_EQ(nccl_mask, 0x5E);
  reg.ExpireActivations(1000 + 1000000);
  EXPECT_EQ(nccl_mask, static_cast<int>(kDefaultEventMask));
  EXPECT_EQ(reg.End(ca, kCommFinalize, 2000), 1);
  EXPECT_EQ(reg.End(cb, kCommFinalize, 2000), 0);
  const auto events = reg.TakeEvents();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[3].kind, kCommFinalize);
}

}  // namespace
}  // namespace pitstop::plugin
