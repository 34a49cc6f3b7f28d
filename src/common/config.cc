#include "pitstop/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "pitstop/bounded_file.h"
#include "pitstop/status_macros.h"

namespace pitstop {

struct ConfigSchema::Entry {
  std::string key;
  FieldPtr field;
  std::string help;
  CLI::Option* option = nullptr;
  // Set by Bound(): the value must lie in [lo, hi].
  bool bounded = false;
  double lo = 0;
  double hi = 0;
};

namespace {

template <typename Int>
absl::Status ParseInteger(absl::string_view text, Int* out) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  Int value{};
  const char* begin = t.data();
  const char* end = t.data() + t.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (t.empty() || ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ",
        std::is_signed_v<Int> ? "an integer" : "an unsigned integer",
        " in range, got '", text, "'"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ParseBool(absl::string_view text, bool* out) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "true" || t == "yes" || t == "on" || t == "1") {
    *out = true;
  } else if (t == "false" || t == "no" || t == "off" || t == "0") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("expected true or false, got '", text, "'"));
  }
  return absl::OkStatus();
}

absl::Status ParseDouble(absl::string_view text, double* out) {
  std::string t(absl::StripAsciiWhitespace(text));
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || errno != 0 || end != t.c_str() + t.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a number, got '", text, "'"));
  }
  *out = v;
  return absl::OkStatus();
}

// Sets a scalar field from text. Lists take one comma-separated string.
struct ScalarSetter {
  absl::string_view text;
  absl::Status operator()(std::string* f) const {
    *f = std::string(text);
    return absl::OkStatus();
  }
  absl::Status operator()(bool* f) const { return ParseBool(text, f); }
  absl::Status operator()(int32_t* f) const { return ParseInteger(text, f); }
  absl::Status operator()(int64_t* f) const { return ParseInteger(text, f); }
  absl::Status operator()(uint32_t* f) const { return ParseInteger(text, f); }
  absl::Status operator()(uint64_t* f) const { return ParseInteger(text, f); }
  absl::Status operator()(double* f) const { return ParseDouble(text, f); }
  absl::Status operator()(std::vector<std::string>* f) const {
    f->clear();
    for (absl::string_view part :
         absl::StrSplit(text, ',', absl::SkipEmpty())) {
      f->emplace_back(absl::StripAsciiWhitespace(part));
    }
    return absl::OkStatus();
  }
};

// The value of a numeric field as a double; nullopt for other fields.
struct NumericValue {
  std::optional<double> operator()(std::string*) const { return {}; }
  std::optional<double> operator()(bool*) const { return {}; }
  std::optional<double> operator()(std::vector<std::string>*) const {
    return {};
  }
  template <typename T>
  std::optional<double> operator()(T* f) const {
    return static_cast<double>(*f);
  }
};

struct DefaultPrinter {
  std::string operator()(std::string* f) const { return *f; }
  std::string operator()(bool* f) const { return *f ? "true" : "false"; }
  std::string operator()(std::vector<std::string>* f) const {
    return absl::StrJoin(*f, ",");
  }
  template <typename T>
  std::string operator()(T* f) const {
    return absl::StrCat(*f);
  }
};

std::string Where(absl::string_view source, const YAML::Mark& mark) {
  if (mark.line < 0) return std::string(source);
  return absl::StrCat(source, ":", mark.line + 1, ":", mark.column + 1);
}

// Finds the first anchor or alias of a document, without building nodes.
// yaml-cpp expands aliases into the node tree it builds: a 644-byte alias
// bomb (each level naming the previous one twice, 24 deep) took 27 s and
// 2.6 GB. Our configurations have no use for either, so both are refused.
class AnchorFinder final : public YAML::EventHandler {
 public:
  std::optional<std::pair<YAML::Mark, const char*>> found;

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t a) override { Check(m, a); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override {
    if (!found) found.emplace(m, "an alias");
  }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t a,
                const std::string&) override {
    Check(m, a);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&,
                       YAML::anchor_t a, YAML::EmitterStyle::value) override {
    Check(m, a);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t a,
                  YAML::EmitterStyle::value) override {
    Check(m, a);
  }
  void OnMapEnd() override {}

 private:
  void Check(const YAML::Mark& m, YAML::anchor_t a) {
    if (a != YAML::NullAnchor && !found) found.emplace(m, "an anchor");
  }
};

// InvalidArgument naming the source, line, column and byte offset of the
// first anchor or alias in `yaml`; syntax errors are left to YAML::Load.
absl::Status RefuseAnchors(const std::string& yaml, absl::string_view source) {
  std::istringstream in(yaml);
  AnchorFinder finder;
  try {
    YAML::Parser parser(in);
    while (!finder.found && parser.HandleNextDocument(finder)) {
    }
  } catch (const YAML::ParserException&) {
    return absl::OkStatus();  // reported by YAML::Load with its mark
  }
  if (!finder.found) return absl::OkStatus();
  const YAML::Mark& m = finder.found->first;
  return absl::InvalidArgumentError(absl::StrCat(
      Where(source, m), " (byte offset ", m.pos, "): ", finder.found->second,
      " ('&' or '*'): YAML anchors and aliases are not accepted in pitstop "
      "configurations"));
}

// Flattens a YAML mapping into dotted keys, remembering each node. A key
// given twice in one mapping is refused: yaml-cpp keeps both and the later
// one would silently win.
absl::Status Flatten(const YAML::Node& node, const std::string& prefix,
                     absl::string_view source,
                     std::vector<std::pair<std::string, YAML::Node>>* out) {
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      const std::string full = prefix.empty() ? key : prefix + "." + key;
      if (!seen.insert(key).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(source, kv.first.Mark()), ": duplicate key '", full, "'"));
      }
      RETURN_IF_ERROR(Flatten(kv.second, full, source, out));
    }
    return absl::OkStatus();
  }
  out->emplace_back(prefix, node);
  return absl::OkStatus();
}

}  // namespace

ConfigSchema::ConfigSchema(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

ConfigSchema::~ConfigSchema() = default;

std::string ConfigSchema::FlagForKey(std::string_view key) {
  return absl::StrCat(
      "--", absl::StrReplaceAll(absl::string_view(key.data(), key.size()),
                                {{".", "-"}, {"_", "-"}}));
}

void ConfigSchema::AddEntry(std::string_view key, FieldPtr field,
                            std::string help) {
  entries_.push_back(Entry{std::string(key), field, std::move(help), nullptr});
}

void ConfigSchema::Add(std::string_view k, std::string* f, std::string h) {
  AddEntry(k, f, std::move(h));
}
void ConfigSchema::Add(std::string_view k, bool* f, std::string h) {
  AddEntry(k, f, std::move(h));
}
void ConfigSchema::Add(std::string_view k, int32_t* f, std::string h) {
  AddEntry(k, f, std::move(h));
}
void ConfigSchema::Add(std::string_view k, int64_t* f, std::string h) {
  AddEntry(k, f, std::move(h));
}
void ConfigSchema::Add(std::string_view k, uint32_t* f, std::string h) {
  AddEntry(k, f, std::move(h));
}
void ConfigSchema::Add(std::string_view k, uint64_t* f, std::string h) {
  AddEntry(k, f, std::move(h));
}
void ConfigSchema::Add(std::string_view k, double* f, std::string h) {
  AddEntry(k, f, std::move(h));
}
void ConfigSchema::Add(std::string_view k, std::vector<std::string>* f,
                       std::string h) {
  AddEntry(k, f, std::move(h));
}

// Sets the field from text, then holds it to the entry's bounds.
absl::Status ConfigSchema::SetChecked(const Entry& e, const std::string& text) {
  if (absl::Status s = std::visit(ScalarSetter{text}, e.field); !s.ok()) {
    return s;
  }
  if (!e.bounded) return absl::OkStatus();
  const std::optional<double> v = std::visit(NumericValue{}, e.field);
  if (v.has_value() && (*v < e.lo || *v > e.hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be in [", e.lo, ", ", e.hi, "], got '", text, "'"));
  }
  return absl::OkStatus();
}

void ConfigSchema::Bound(std::string_view key, double lo, double hi) {
  for (Entry& e : entries_) {
    if (e.key != key) continue;
    e.bounded = true;
    e.lo = lo;
    e.hi = hi;
    e.help = absl::StrCat(e.help, " [", lo, "..", hi, "]");
  }
}

void ConfigSchema::Bound(std::initializer_list<Range> ranges) {
  for (const Range& r : ranges) Bound(r.key, r.lo, r.hi);
}

absl::Status ConfigSchema::LoadYamlString(std::string_view yaml,
                                          std::string_view source_name) {
  const absl::string_view source(source_name.data(), source_name.size());
  YAML::Node root;
  const std::string text(yaml);
  RETURN_IF_ERROR(RefuseAnchors(text, source));
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(source, e.mark), ": YAML syntax error: ", e.msg));
  }
  if (root.IsNull()) return absl::OkStatus();  // empty file: all defaults
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(source, root.Mark()), ": expected a mapping of keys"));
  }
  std::vector<std::pair<std::string, YAML::Node>> flat;
  try {
    RETURN_IF_ERROR(Flatten(root, "", source, &flat));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(source, e.mark), ": ", e.msg));
  }
  for (const auto& [key, node] : flat) {
    // clang < 16 cannot capture structured bindings (fuzz preset).
    const auto& wanted = key;
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.key == wanted; });
    const std::string where = Where(source, node.Mark());
    if (it == entries_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown key '", key, "'"));
    }
    std::string text;
    if (node.IsSequence()) {
      if (!std::holds_alternative<std::vector<std::string>*>(it->field)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": key '", key, "': expected a single value, got a list"));
      }
      std::vector<std::string> items;
      for (const auto& item : node) items.push_back(item.as<std::string>());
      text = absl::StrJoin(items, ",");
    } else if (node.IsScalar()) {
      text = node.Scalar();
    } else if (node.IsNull()) {
      text = "";
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": key '", key, "': expected a value"));
    }
    absl::Status s = SetChecked(*it, text);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": key '", key, "' (", FlagForKey(key), "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ConfigSchema::LoadYamlFile(const std::string& path) {
  // A directory would read as empty and the daemon start with defaults
  // instead of the configuration it was pointed at; a FIFO or /dev/zero
  // would never end.
  absl::StatusOr<std::string> text = ReadRegularFile(path, "--config");
  if (!text.ok()) return text.status();
  return LoadYamlString(*text, path);
}

void ConfigSchema::RegisterFlags(CLI::App* app) {
  app->add_option("-c,--config", config_path_,
                  "YAML config file; flags given on the command line win");
  for (Entry& e : entries_) {
    const std::string flag = FlagForKey(e.key);
    const std::string help = absl::StrCat(e.help, " [yaml: ", e.key, "]");
    // CLI11's add_option(name, description) takes the description by const
    // reference; a named string keeps the overload unambiguous.
    const std::string default_value = std::visit(DefaultPrinter{}, e.field);
    if (std::holds_alternative<bool*>(e.field)) {
      // CLI11 would substitute default_str for a bare flag, so the default
      // of a boolean goes into the help text instead.
      const std::string bool_help =
          absl::StrCat(help, " (default: ", default_value, ")");
      e.option = app->add_option(flag, bool_help);
      e.option->expected(0, 1);
    } else {
      e.option = app->add_option(flag, help);
      e.option->default_str(default_value);
    }
  }
}

absl::Status ConfigSchema::Apply() {
  if (!config_path_.empty()) RETURN_IF_ERROR(LoadYamlFile(config_path_));
  for (Entry& e : entries_) {
    if (e.option == nullptr || e.option->count() == 0) continue;
    const auto& results = e.option->results();
    // A bare boolean flag ("--deep") means true; an empty value of any other
    // option ("--controller ''") is the empty string.
    std::string text = results.empty() ? std::string() : results.back();
    if (text.empty() && std::holds_alternative<bool*>(e.field)) text = "true";
    absl::Status s = SetChecked(e, text);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag ", FlagForKey(e.key), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ConfigParse> ConfigSchema::Parse(int argc,
                                                const char* const* argv) {
  CLI::App app(description_, program_);
  app.get_formatter()->column_width(40);
  RegisterFlags(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return ConfigParse::kExit;
  } catch (const CLI::CallForAllHelp& e) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return ConfigParse::kExit;
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(e.what(), " (run ", program_, " --help)"));
  }
  RETURN_IF_ERROR(Apply());
  return ConfigParse::kRun;
}

}  // namespace pitstop
