#include "pitstop/address.h"

#include <arpa/inet.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pitstop {
namespace {

constexpr size_t kMaxHostName = 253;

absl::Status Bad(absl::string_view what, absl::string_view address,
                 absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": '", address, "': ", why));
}

bool AllDigitsAndDots(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.') {
      return false;
    }
  }
  return true;
}

// "" when `host` is acceptable, else why not.
std::string HostProblem(absl::string_view host, bool bracketed) {
  const std::string h(host);
  if (bracketed) {
    in6_addr v6{};
    return inet_pton(AF_INET6, h.c_str(), &v6) == 1
               ? ""
               : "not an IPv6 address in brackets";
  }
  if (AllDigitsAndDots(host)) {
    // inet_pton takes exactly four decimal parts of 0..255; civetweb and
    // inet_addr would take "999.1.1.1" as 231.1.1.1 or "10.1" as 10.0.0.1.
    in_addr v4{};
    return inet_pton(AF_INET, h.c_str(), &v4) == 1
               ? ""
               : "not an IPv4 address (four parts, each 0..255)";
  }
  if (absl::Status s = ValidateHostName(host, ""); !s.ok()) {
    return std::string(absl::StripPrefix(s.message(), ": "));
  }
  return "";
}

}  // namespace

absl::Status ValidateHostName(absl::string_view name, absl::string_view what) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", absl::CHexEscape(name), "' ", why));
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > kMaxHostName) {
    return bad(absl::StrCat("is longer than ", kMaxHostName, " characters"));
  }
  if (name.front() == '-' || name.front() == '.') {
    return bad("starts with '-' or '.'");
  }
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!absl::ascii_isalnum(u) && c != '-' && c != '_' && c != '.') {
      return bad("is not a host name (letters, digits, '-', '_' and '.' only)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HostPort> ValidateAddress(absl::string_view address,
                                         absl::string_view what,
                                         AddressRules rules) {
  if (absl::StartsWith(address, "unix:")) {
    if (rules.allow_unix && address.size() > 5) return HostPort{};
    return Bad(what, address,
               rules.allow_unix ? "unix: needs a path"
                                : "expected host:port, not a Unix socket");
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return Bad(what, address, "expected host:port");
  }
  absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  const bool bracketed =
      host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  uint32_t port = 0;
  const bool digits =
      !port_text.empty() && port_text.size() <= 5 &&
      std::all_of(port_text.begin(), port_text.end(),
                  [](char c) { return absl::ascii_isdigit(c); });
  if (!digits || !absl::SimpleAtoi(port_text, &port) || port > 65535 ||
      (port == 0 && !rules.allow_port_zero)) {
    return Bad(what, address,
               rules.allow_port_zero
                   ? "port must be a number in 0..65535 (0 = any free port)"
                   : "port must be a number in 1..65535");
  }
  if (const std::string problem = HostProblem(host, bracketed);
      !problem.empty()) {
    return Bad(what, address, problem);
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

}  // namespace pitstop
