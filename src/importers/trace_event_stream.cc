#include "src/importers/trace_event_stream.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

// SAX handler: builds a small DOM for each element of the top-level
// "traceEvents" array (and for "distributedInfo"), hands it to the
// collector and forgets it.
class Sax final : public nlohmann::json_sax<json> {
 public:
  Sax(TraceEventSink* collector, InputStream* in,
      const std::function<void(uint64_t, uint64_t)>& progress)
      : collector_(collector), in_(in), progress_(progress) {}

  bool null() override { return Value(json(nullptr)); }
  bool boolean(bool v) override { return Value(json(v)); }
  bool number_integer(number_integer_t v) override { return Value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override {
    return Value(json(v));
  }
  bool string(string_t& v) override { return Value(json(std::move(v))); }
  bool binary(binary_t&) override { return Value(json(nullptr)); }

  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override {
    if (depth_ == 1 && root_key_ == "traceEvents") {
      ++depth_;
      in_events_ = true;
      return true;
    }
    return Open(json::array());
  }
  bool end_object() override { return Close(); }
  bool end_array() override {
    if (in_events_ && depth_ == 2 && stack_.empty()) {
      --depth_;
      in_events_ = false;
      return true;
    }
    return Close();
  }
  bool key(string_t& k) override {
    if (depth_ == 1) root_key_ = k;
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_position_ = position;
    error_ = ex.what();
    return false;
  }

  size_t error_position() const { return error_position_; }
  const std::string& error() const { return error_; }
  bool saw_root_object() const { return saw_root_; }
  uint64_t events() const { return count_; }

 private:
  bool Capturing() const {
    return (in_events_ && depth_ >= 2) ||
           (depth_ >= 1 && root_key_ == "distributedInfo" && !stack_.empty());
  }

  bool Open(json fresh) {
    if (depth_ == 0) {
      saw_root_ = fresh.is_object();
      ++depth_;
      return true;
    }
    bool start_capture =
        stack_.empty() && ((in_events_ && depth_ == 2) ||
                           (depth_ == 1 && root_key_ == "distributedInfo"));
    ++depth_;
    if (start_capture) {
      current_ = std::move(fresh);
      stack_.push_back(&current_);
      return true;
    }
    if (stack_.empty()) return true;  // skipping an uninteresting subtree
    json* parent = stack_.back();
    json* child;
    if (parent->is_array()) {
      parent->push_back(std::move(fresh));
      child = &parent->back();
    } else {
      child = &(*parent)[key_];
      *child = std::move(fresh);
    }
    stack_.push_back(child);
    return true;
  }

  bool Close() {
    --depth_;
    if (stack_.empty()) return true;
    stack_.pop_back();
    if (stack_.empty()) {
      if (in_events_) {
        collector_->Event(current_);
        if (++count_ % 4096 == 0 && progress_) {
          uint64_t off = in_->compressed_offset();
          if (off >= next_report_) {
            progress_(off, in_->file_size());
            next_report_ = off + (16u << 20);
          }
        }
      } else {
        collector_->Distributed(current_);
      }
      current_ = json();
    }
    return true;
  }

  bool Value(json v) {
    if (stack_.empty()) return true;
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
    } else {
      (*top)[key_] = std::move(v);
    }
    return true;
  }

  TraceEventSink* collector_;
  InputStream* in_;
  const std::function<void(uint64_t, uint64_t)>& progress_;
  int depth_ = 0;
  bool in_events_ = false;
  bool saw_root_ = false;
  std::string root_key_;
  std::string key_;
  json current_;
  std::vector<json*> stack_;
  uint64_t count_ = 0;
  uint64_t next_report_ = 16u << 20;
  size_t error_position_ = 0;
  std::string error_;
};

}  // namespace

absl::StatusOr<uint64_t> StreamTraceEvents(
    InputStream* in, const std::string& file, TraceEventSink* sink,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  Sax sax(sink, in, progress);
  bool ok = false;
  try {
    ok = json::sax_parse(in->stream(), &sax, json::input_format_t::json, true);
  } catch (const std::exception& e) {
    // A read error or decompression cap ends the input mid-document: the
    // cause, not the parser's complaint about the end.
    if (!in->status().ok()) return in->status();
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e.what()));
  }
  if (!in->status().ok()) return in->status();
  if (!ok) {
    if (sax.error_position() <= 1 && sax.events() == 0 &&
        (sax.error().find("empty input") != std::string::npos ||
         sax.error().find("end of input") != std::string::npos)) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": empty file"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": malformed JSON at byte ", sax.error_position(),
                     " (after decompression): ", sax.error()));
  }
  if (!sax.saw_root_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": not a Chrome trace (top level is not an object)"));
  }
  return sax.events();
}

}  // namespace pitstop::importers
