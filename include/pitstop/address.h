// Network addresses and host names given as flags, checked once for every
// binary (docs/reliability.md, "Bounded inputs"). The libraries behind them
// are lenient in ways that hide mistakes: gRPC takes port 99999 as 34463
// (mod 65536) and civetweb takes 999.1.1.1 as 231.1.1.1, so a typo binds
// somewhere nobody asked for instead of failing.
//
//   RETURN_IF_ERROR(ValidateAddress(o.listen, "listen (--listen)",
//                                   {.allow_port_zero = true}).status());
#ifndef PITSTOP_ADDRESS_H_
#define PITSTOP_ADDRESS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pitstop {

struct HostPort {
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;
};

struct AddressRules {
  // Port 0 (the kernel picks one): right for a listener, not for a peer.
  bool allow_port_zero = false;
  // "unix:PATH" (gRPC's Unix-socket form); HostPort is then empty.
  bool allow_unix = false;
};

// Parses "host:port" or "[ipv6]:port". The host is a dotted IPv4 address
// whose four parts are each 0..255, an IPv6 address in brackets, or a host
// name (ValidateHostName); the port is a decimal number 1..65535 (0 too with
// allow_port_zero). InvalidArgument starting with `what` (the key and flag)
// and quoting the address otherwise.
absl::StatusOr<HostPort> ValidateAddress(absl::string_view address,
                                         absl::string_view what,
                                         AddressRules rules = {});

// A host name as pitstop stores and shows it: 1..253 characters of letters,
// digits, '-', '_' and '.', not starting with '-' or '.'. Spaces, control
// characters, '/' and ':' are refused: the name ends up in metric labels,
// file names and the controller's records. InvalidArgument starting with
// `what` otherwise.
absl::Status ValidateHostName(absl::string_view name, absl::string_view what);

}  // namespace pitstop

#endif  // PITSTOP_ADDRESS_H_
