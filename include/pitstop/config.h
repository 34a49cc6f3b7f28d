// Configuration from a YAML file plus command-line flags; flags win.
//
// A daemon declares its options as a plain struct, binds each field to a
// dotted YAML key, and the flag name is derived from the key
// ("ingest.socket_path" <-> --ingest-socket-path):
//
//   AgentOptions opts;                      // defaults in member initializers
//   ConfigSchema schema("pitstop-agent", "Node agent ...");
//   schema.Add("ingest.socket_path", &opts.socket_path, "Unix socket ...");
//   ASSIGN_OR_RETURN(ConfigParse p, schema.Parse(argc, argv));
//   if (p == ConfigParse::kExit) return 0;   // --help printed
//
// Errors name the source and the place: "agent.yaml:7:3: key
// 'upstream.batch_ms': expected an unsigned integer, got 'soon'"; unknown keys
// are errors too, so a typo is never silently ignored.
#ifndef PITSTOP_CONFIG_H_
#define PITSTOP_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace pitstop {

enum class ConfigParse {
  kRun,   // options are ready; run the program
  kExit,  // --help (or similar) was printed; exit 0
};

// Not thread-safe; used from main() before threads start.
class ConfigSchema {
 public:
  ConfigSchema(std::string program, std::string description);
  ~ConfigSchema();
  ConfigSchema(const ConfigSchema&) = delete;
  ConfigSchema& operator=(const ConfigSchema&) = delete;

  // Binds `key` (dotted YAML path) to `field`. The field's current value is
  // the default shown in --help.
  void Add(std::string_view key, std::string* field, std::string help);
  void Add(std::string_view key, bool* field, std::string help);
  void Add(std::string_view key, int32_t* field, std::string help);
  void Add(std::string_view key, int64_t* field, std::string help);
  void Add(std::string_view key, uint32_t* field, std::string help);
  void Add(std::string_view key, uint64_t* field, std::string help);
  void Add(std::string_view key, double* field, std::string help);
  void Add(std::string_view key, std::vector<std::string>* field,
           std::string help);

  // Holds the numeric field of `key` (added before) to [lo, hi], from the
  // YAML file and from its flag alike: "c.yaml:4:3: key 'batch_ms'
  // (--batch-ms): must be in [1, 60000], got '0'". The range is shown in
  // --help. Call before Parse() / RegisterFlags().
  void Bound(std::string_view key, double lo, double hi);
  struct Range {
    const char* key;
    double lo;
    double hi;
  };
  void Bound(std::initializer_list<Range> ranges);

  // Parses argv: `--config FILE` is loaded first, then flags given on the
  // command line override it. Returns InvalidArgument naming the file, line
  // and key (or the flag) on bad input; kExit after printing --help.
  absl::StatusOr<ConfigParse> Parse(int argc, const char* const* argv);

  // Adds --config and every bound flag to an existing CLI11 app (for tools
  // with subcommands); call Apply() after app->parse().
  void RegisterFlags(CLI::App* app);
  absl::Status Apply();

  // Loads YAML text; `source_name` is used in error messages.
  absl::Status LoadYamlString(std::string_view yaml,
                              std::string_view source_name);
  // Loads a YAML file through ReadRegularFile (pitstop/bounded_file.h):
  // NotFound if it does not exist; InvalidArgument naming --config for a
  // directory, FIFO or device, or a file over kMaxFlagFileBytes.
  absl::Status LoadYamlFile(const std::string& path);

  // The path given with --config, empty if none.
  const std::string& config_path() const { return config_path_; }

  // Returns the flag name for a key: "a.b_c" -> "--a-b-c".
  static std::string FlagForKey(std::string_view key);

 private:
  using FieldPtr =
      std::variant<std::string*, bool*, int32_t*, int64_t*, uint32_t*,
                   uint64_t*, double*, std::vector<std::string>*>;
  struct Entry;
  void AddEntry(std::string_view key, FieldPtr field, std::string help);
  static absl::Status SetChecked(const Entry& e, const std::string& text);

  std::string program_;
  std::string description_;
  std::string config_path_;
  std::vector<Entry> entries_;
};

}  // namespace pitstop

#endif  // PITSTOP_CONFIG_H_
