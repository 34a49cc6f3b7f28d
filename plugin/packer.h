// Record -> telemetry.proto packing, and NCCL's strings -> proto enums.
// Runs on the exporter thread (or in `pitstop replay`), never the hot path.
#ifndef PITSTOP_PLUGIN_PACKER_H_
#define PITSTOP_PLUGIN_PACKER_H_

#include <cstdint>
#include <string>

#include "plugin/record.h"

namespace pitstop::plugin {

// NCCL's profiler strings (nccl-plugin-abi.md sec. 6.7) -> the numeric
// values of the common.proto enums CollFunc, DataType, Algorithm, Protocol.
// nullptr maps to *_UNSPECIFIED (0), an unknown string to *_OTHER.
int MapFunc(const char* func);
int MapDataType(const char* datatype);
int MapAlgorithm(const char* algo);
int MapProtocol(const char* proto);
// Element size in bytes of a datatype string; 0 when unknown.
uint32_t DataTypeSize(const char* datatype);

// Appends `record`, encoded as the matching repeated field of
// StreamTelemetryRequest (ops, completions, ...), to `batch`. `scratch` is
// reused between calls to avoid allocations.
void PackRecord(const Record& record, std::string* batch, std::string* scratch);

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_PACKER_H_
