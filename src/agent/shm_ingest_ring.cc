// ShmIngestServer's ring reading (shm_ingest_loop.h): messages bounded
// before they are parsed, handed on, and the read position published.
#include <cstring>
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "pitstop/shm_transport.h"
#include "src/agent/message_bound.h"
#include "src/agent/peer_cred.h"
#include "src/agent/shm_ingest_loop.h"

namespace pitstop::agent {

bool ShmIngestServer::Loop::HandleRingMessage(Conn* c, const char* shared,
                                              uint32_t size, uint64_t pos,
                                              uint64_t* objects, bool* parsed) {
  // Read the shared bytes once; count and parse the private copy only.
  message_copy.assign(shared, size);
  const char* p = message_copy.data();
  // A large copy is given back once this message is handled, on every path.
  struct GiveBack {
    std::string* copy;
    ~GiveBack() {
      if (copy->capacity() > kReusedCopyBytes) std::string().swap(*copy);
    }
  } give_back{&message_copy};
  uint64_t n = 0;
  const MessageBound bound =
      CountMessageObjects(p, size, v1::StreamTelemetryRequest::descriptor(),
                          kMaxMessageObjects, &n);
  if (bound == MessageBound::kTooMany) {
    Count(&ShmIngestStats::oversized);
    return Malformed(c, "ring message", pos,
                     absl::StrCat("more than ", kMaxMessageObjects,
                                  " records; refused before parsing"));
  }
  if (bound == MessageBound::kMalformed ||
      !req.ParseFromArray(p, static_cast<int>(size))) {
    return Malformed(c, "ring message", pos, "not a StreamTelemetryRequest");
  }
  *parsed = true;
  *objects += n;
  absl::Status st;
  if (s->options_.verify_pid && req.has_hello()) {
    // The telemetry hello inside the ring is what ranks are
    // attributed by: it may not name another process either.
    st = CheckClaimedPid(req.hello().pid(), c->peer_cred_);
    if (!st.ok()) Count(&ShmIngestStats::pid_refused);
  }
  // An exception (out of memory) ends this stream, not the agent.
  try {
    if (st.ok()) st = s->handler_->OnMessage(c->stream_, req);
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError("agent out of memory");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("agent error: ", e.what()));
  } catch (...) {
    st = absl::InternalError("agent error: unknown exception");
  }
  // A cleared repeated field keeps its elements: give a large message's
  // memory back.
  if (n > kReusedObjects) req = v1::StreamTelemetryRequest();
  if (!st.ok()) {
    Log()->warn("{} (hello pid {}): {}; closing this connection", c->peer_,
                c->hello_pid_, st.ToString());
    c->eof_ = true;
    return false;
  }
  return true;
}

bool ShmIngestServer::Loop::DrainRing(Conn* c, uint64_t max_bytes,
                                      uint64_t max_objects) {
  c->backlog_ = false;
  if (c->header_ == nullptr) return true;
  const uint64_t write = c->header_->write_pos.load(std::memory_order_acquire);
  if (write < c->read_pos_ || write - c->read_pos_ > c->ring_bytes_) {
    return Malformed(c, "ring", c->read_pos_,
                     absl::StrCat("write position ", write));
  }
  uint64_t pos = c->read_pos_;
  const uint64_t stop = write - pos <= max_bytes ? write : pos + max_bytes;
  uint64_t records = 0, bytes = 0, messages = 0, objects = 0;
  bool ok = true;
  while (pos < stop && ok && objects < max_objects) {
    const uint64_t off = pos & (c->ring_bytes_ - 1);
    shm::MessageHeader m;
    std::memcpy(&m, c->data_ + off, sizeof(m));
    if (m.size == shm::kPadMarker) {
      pos += c->ring_bytes_ - off;
      continue;
    }
    const uint64_t need = shm::MessageFootprint(m.size);
    if (need > c->ring_bytes_ - off || pos + need > write) {
      ok = Malformed(c, "ring message", pos,
                     absl::StrCat("size ", m.size, " does not fit"));
      break;
    }
    bool parsed = false;
    ok = HandleRingMessage(c, c->data_ + off + sizeof(m), m.size, pos, &objects,
                           &parsed);
    if (!parsed) break;
    pos += need;
    records += m.records;
    bytes += m.size;
    ++messages;
  }
  c->backlog_ = ok && pos < write;
  Published(c, pos, records, bytes, messages);
  return ok;
}

void ShmIngestServer::Loop::Published(Conn* c, uint64_t pos, uint64_t records,
                                      uint64_t bytes, uint64_t messages) {
  c->read_pos_ = pos;
  c->records_read_ += records;
  c->header_->records_read.store(c->records_read_, std::memory_order_release);
  c->header_->read_pos.store(pos, std::memory_order_release);
  // Only now, with records_read published: what a batch then says was
  // read is never more than what the process counts as delivered.
  if (records != 0) s->handler_->OnRecordsRead(c->stream_, records);
  if (messages != 0) {
    MutexLock lock(&s->stats_mu_);
    s->stats_.messages += messages;
    s->stats_.records += records;
    s->stats_.bytes += bytes;
  }
}

}  // namespace pitstop::agent
