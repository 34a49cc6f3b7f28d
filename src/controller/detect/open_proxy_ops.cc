#include "src/controller/detect/open_proxy_ops.h"

#include <algorithm>
#include <map>
#include <utility>

namespace pitstop::controller {

std::vector<OpenLink> OpenProxyLinks(const FuncProgress& fp, int64_t seq,
                                     int* open_total, int* conn_total) {
  struct Side {
    std::map<uint32_t, bool> send_open, recv_open;  // per channel
    uint64_t bytes = UINT64_MAX;
  };
  std::map<std::pair<int32_t, int32_t>, Side> conns;
  bool any_stopped = false;
  for (const auto& [me, rp] : fp.ranks) {
    if (rp.oldest_incomplete_seq != seq) continue;
    for (const auto& [k, bytes] : rp.in_flight) {
      const auto& [peer, channel, is_send] = k;
      const bool open = rp.in_flight_stopped.count(k) == 0;
      any_stopped |= !open;
      Side& s =
          conns[is_send ? std::make_pair(me, peer) : std::make_pair(peer, me)];
      bool& slot = is_send ? s.send_open[channel] : s.recv_open[channel];
      slot = slot || open;
      s.bytes = std::min(s.bytes, bytes.first);
    }
  }
  // The plugin emits a ProxyOp record only when the op stops, so open ops
  // are usually absent: on a channel, a rank with a stopped recv but no
  // send record has its send open, one with a send but no recv its recv.
  // One of each on a channel is the open connection sender -> receiver.
  std::map<uint32_t, std::map<int32_t, std::pair<bool, bool>>> per_channel;
  for (const auto& [r, rp] : fp.ranks) {
    if (rp.oldest_incomplete_seq != seq) continue;
    for (const auto& [k, bytes] : rp.in_flight) {
      auto& sr = per_channel[std::get<1>(k)][r];
      (std::get<2>(k) ? sr.first : sr.second) = true;
    }
  }
  for (const auto& [channel, ranks] : per_channel) {
    std::vector<int32_t> no_send, no_recv;
    for (const auto& [r, sr] : ranks) {
      if (!sr.first && sr.second) no_send.push_back(r);
      if (sr.first && !sr.second) no_recv.push_back(r);
    }
    if (no_send.size() != 1 || no_recv.size() != 1) continue;
    Side& s = conns[{no_send[0], no_recv[0]}];
    s.send_open[channel] = true;
    s.recv_open[channel] = true;
    s.bytes = 0;
  }
  std::vector<OpenLink> open;
  for (const auto& [link, s] : conns) {
    OpenLink l{link.first, link.second, 0, s.bytes, 0};
    std::map<uint32_t, bool> chans;
    for (const auto& [ch, o] : s.send_open) chans[ch] |= o;
    for (const auto& [ch, o] : s.recv_open) chans[ch] |= o;
    for (const auto& [ch, o] : chans) l.channels += o;
    l.sides_open = std::any_of(s.send_open.begin(), s.send_open.end(),
                               [](auto& e) { return e.second; }) +
                   std::any_of(s.recv_open.begin(), s.recv_open.end(),
                               [](auto& e) { return e.second; });
    if (l.sides_open > 0) open.push_back(l);
  }
  if (open_total) *open_total = static_cast<int>(open.size());
  if (conn_total) *conn_total = static_cast<int>(conns.size());
  if (!any_stopped || open.empty()) return {};
  const int best = std::max_element(open.begin(), open.end(),
                                    [](const OpenLink& a, const OpenLink& b) {
                                      return a.sides_open < b.sides_open;
                                    })
                       ->sides_open;
  std::erase_if(open, [&](const OpenLink& l) { return l.sides_open < best; });
  // Byte progress, when there is any, breaks ties: least bytes moved.
  const uint64_t least =
      std::min_element(open.begin(), open.end(),
                       [](const OpenLink& a, const OpenLink& b) {
                         return a.bytes < b.bytes;
                       })
          ->bytes;
  std::erase_if(open, [&](const OpenLink& l) { return l.bytes > least; });
  if (open.size() * 2 > conns.size()) return {};
  return open;
}

}  // namespace pitstop::controller
