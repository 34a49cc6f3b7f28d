// pitstopctl refuses a request whose text fields are not UTF-8 before it
// is sent: protobuf would send it anyway (logging an error) and the
// controller could not parse it, so the call failed with an empty message
// and exit 6. Now the argument is named and pitstopctl exits 2.
#ifndef PITSTOP_TOOLS_PITSTOPCTL_UTF8_CHECK_H_
#define PITSTOP_TOOLS_PITSTOPCTL_UTF8_CHECK_H_

#include <string>

#include "google/protobuf/message.h"

namespace pitstop::ctl {

// "" when every string field of `m` (nested messages too) is UTF-8; else
// the first that is not, as "hosts[1]: byte 255 at offset 1 is not UTF-8".
std::string NonUtf8Field(const google::protobuf::Message& m);

}  // namespace pitstop::ctl

#endif  // PITSTOP_TOOLS_PITSTOPCTL_UTF8_CHECK_H_
