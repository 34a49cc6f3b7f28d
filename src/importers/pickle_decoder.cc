#include "src/importers/pickle_decoder.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pitstop/status_macros.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kBytes,
  kList,
  kTuple,
  kDict,
  kSet,
  kMark,
};

// A stack / memo value. Containers live in the decoder's arena and are
// referenced by index, so memo sharing (and even reference cycles) need no
// ownership graph.
struct Value {
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;
  uint32_t container = 0;
};

Value Tagged(Kind kind) {
  Value v;
  v.kind = kind;
  return v;
}

struct Container {
  Kind kind;
  // Lists, tuples, sets: the items. Dicts: key, value, key, value, ...
  std::vector<Value> items;
};

const char* OpName(uint8_t op) {
  switch (op) {
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    default:
      return nullptr;
  }
}

class Decoder {
 public:
  Decoder(absl::string_view data, absl::string_view name)
      : data_(data), name_(name) {}

  absl::StatusOr<json> Run() {
    ASSIGN_OR_RETURN(Value root, Execute());
    int64_t budget = 64 * static_cast<int64_t>(data_.size()) + 4096;
    return ToJson(root, 0, &budget);
  }

 private:
  absl::Status Error(size_t offset, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": offset ", offset, ": ", what));
  }

  absl::Status Need(size_t n) const {
    if (data_.size() - pos_ < n) {
      return Error(op_pos_,
                   absl::StrCat("truncated pickle: opcode needs ", n,
                                " more bytes, ", data_.size() - pos_, " left"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> ReadLE(size_t n) {
    RETURN_IF_ERROR(Need(n));
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + k]))
           << (8 * k);
    }
    pos_ += n;
    return v;
  }

  absl::StatusOr<absl::string_view> ReadBytes(uint64_t n) {
    if (n > data_.size() - pos_) {
      return Error(op_pos_, absl::StrCat("length ", n, " exceeds the ",
                                         data_.size() - pos_,
                                         " bytes left (truncated or corrupt)"));
    }
    absl::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  absl::StatusOr<absl::string_view> ReadLine() {
    size_t end = data_.find('\n', pos_);
    if (end == absl::string_view::npos) {
      return Error(op_pos_, "truncated pickle: text argument without newline");
    }
    absl::string_view out = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }

  absl::StatusOr<Value> Pop() {
    if (stack_.empty()) return Error(op_pos_, "stack underflow");
    Value v = std::move(stack_.back());
    stack_.pop_back();
    if (v.kind == Kind::kMark) return Error(op_pos_, "unexpected MARK");
    return v;
  }

  // Pops everything above the topmost MARK (and the mark).
  absl::StatusOr<std::vector<Value>> PopToMark() {
    size_t k = stack_.size();
    while (k > 0 && stack_[k - 1].kind != Kind::kMark) --k;
    if (k == 0) return Error(op_pos_, "no MARK on the stack");
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + k),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(k - 1);
    return items;
  }

  Value NewContainer(Kind kind, std::vector<Value> items = {}) {
    Value v;
    v.kind = kind;
    v.container = static_cast<uint32_t>(arena_.size());
    arena_.push_back(Container{kind, std::move(items)});
    return v;
  }

  absl::StatusOr<Container*> TopContainer(size_t below, Kind want) {
    if (stack_.size() < below + 1) return Error(op_pos_, "stack underflow");
    Value& v = stack_[stack_.size() - 1 - below];
    bool ok = v.kind == want || (want == Kind::kList && v.kind == Kind::kSet);
    if (!ok) {
      return Error(op_pos_, want == Kind::kDict
                                ? "SETITEM(S) target is not a dict"
                                : "APPEND(S)/ADDITEMS target is not a list");
    }
    return &arena_[v.container];
  }

  absl::Status PushInt(absl::string_view text) {
    Value v;
    if (text == "01" || text == "00") {
      v.kind = Kind::kBool;
      v.i = text == "01";
    } else {
      if (!text.empty() && text.back() == 'L') text.remove_suffix(1);
      v.kind = Kind::kInt;
      if (!absl::SimpleAtoi(text, &v.i)) {
        return Error(op_pos_, absl::StrCat("bad or >64-bit integer '",
                                           text.substr(0, 40), "'"));
      }
    }
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }

  absl::Status PushLong(absl::string_view bytes) {
    if (bytes.size() > 8) {
      return Error(op_pos_, "integer wider than 64 bits is not supported");
    }
    uint64_t u = 0;
    for (size_t k = 0; k < bytes.size(); ++k) {
      u |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[k])) << (8 * k);
    }
    if (!bytes.empty() && bytes.size() < 8 &&
        (static_cast<uint8_t>(bytes.back()) & 0x80)) {
      u |= ~uint64_t{0} << (8 * bytes.size());  // sign-extend
    }
    Value v;
    v.kind = Kind::kInt;
    v.i = static_cast<int64_t>(u);
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }

  void PushStr(Kind kind, absl::string_view s) {
    Value v;
    v.kind = kind;
    v.s = std::string(s);
    stack_.push_back(std::move(v));
  }

  absl::Status Put(uint64_t index) {
    if (stack_.empty() || stack_.back().kind == Kind::kMark) {
      return Error(op_pos_, "memo PUT with nothing to store");
    }
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }

  absl::Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) {
      return Error(op_pos_, absl::StrCat("memo GET of unknown index ", index));
    }
    stack_.push_back(it->second);
    return absl::OkStatus();
  }

  absl::StatusOr<Value> Execute();
  absl::Status Step(uint8_t op, bool* stop);
  // Step's opcode families; each returns nullopt for an opcode not its own.
  std::optional<absl::Status> StackOp(uint8_t op);
  std::optional<absl::Status> NumberOp(uint8_t op);
  std::optional<absl::Status> StringOp(uint8_t op);
  std::optional<absl::Status> ContainerOp(uint8_t op);
  std::optional<absl::Status> FillOp(uint8_t op);
  std::optional<absl::Status> MemoOp(uint8_t op);

  absl::StatusOr<json> ToJson(const Value& v, int depth, int64_t* budget);

  absl::string_view data_;
  absl::string_view name_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::vector<Value> stack_;
  std::vector<Container> arena_;
  absl::flat_hash_map<uint64_t, Value> memo_;
};

absl::StatusOr<Value> Decoder::Execute() {
  if (data_.empty()) return Error(0, "empty file (not a pickle)");
  bool stop = false;
  while (!stop) {
    if (pos_ >= data_.size()) {
      return Error(pos_, "truncated pickle: input ended before STOP");
    }
    op_pos_ = pos_;
    uint8_t op = static_cast<uint8_t>(data_[pos_++]);
    if (const char* refused = OpName(op)) {
      return Error(op_pos_,
                   absl::StrFormat("opcode 0x%02x '%s' refused: pickles that "
                                   "import or call code are not accepted (a "
                                   "dump is untrusted input)",
                                   op, refused));
    }
    RETURN_IF_ERROR(Step(op, &stop));
  }
  if (stack_.size() != 1 || stack_[0].kind == Kind::kMark) {
    return Error(op_pos_, absl::StrCat("STOP with ", stack_.size(),
                                       " values on the stack (expected 1)"));
  }
  return std::move(stack_[0]);
}

absl::Status Decoder::Step(uint8_t op, bool* stop) {
  if (op == '.') {  // STOP
    *stop = true;
    return absl::OkStatus();
  }
  for (auto family :
       {&Decoder::StackOp, &Decoder::NumberOp, &Decoder::StringOp,
        &Decoder::ContainerOp, &Decoder::FillOp, &Decoder::MemoOp}) {
    if (std::optional<absl::Status> s = (this->*family)(op)) return *s;
  }
  return Error(op_pos_, absl::StrFormat("unknown pickle opcode 0x%02x", op));
}

// PROTO, FRAME, MARK, POP, POP_MARK, DUP.
std::optional<absl::Status> Decoder::StackOp(uint8_t op) {
  switch (op) {
    case 0x80: {  // PROTO
      ASSIGN_OR_RETURN(uint64_t proto, ReadLE(1));
      if (proto > 5) {
        return Error(op_pos_, absl::StrCat("unsupported protocol ", proto));
      }
      return absl::OkStatus();
    }
    case 0x95:
      return ReadLE(8).status();  // FRAME: length only
    case '(':
      stack_.push_back(Tagged(Kind::kMark));
      return absl::OkStatus();
    case '0':
      return Pop().status();
    case '1':
      return PopToMark().status();
    case '2':
      if (stack_.empty()) return Error(op_pos_, "DUP on empty stack");
      stack_.push_back(stack_.back());
      return absl::OkStatus();
    default:
      return std::nullopt;
  }
}

// None, booleans, integers and floats.
std::optional<absl::Status> Decoder::NumberOp(uint8_t op) {
  switch (op) {
    case 'N':
      stack_.push_back(Tagged(Kind::kNone));
      return absl::OkStatus();
    case 0x88:
    case 0x89: {
      Value v;
      v.kind = Kind::kBool;
      v.i = op == 0x88;
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'I':
    case 'L': {
      ASSIGN_OR_RETURN(absl::string_view line, ReadLine());
      return PushInt(line);
    }
    case 'J': {
      ASSIGN_OR_RETURN(uint64_t u, ReadLE(4));
      Value v;
      v.kind = Kind::kInt;
      v.i = static_cast<int32_t>(static_cast<uint32_t>(u));
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'K':
    case 'M': {
      ASSIGN_OR_RETURN(uint64_t u, ReadLE(op == 'K' ? 1 : 2));
      Value v;
      v.kind = Kind::kInt;
      v.i = static_cast<int64_t>(u);
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 0x8a:
    case 0x8b: {  // LONG1, LONG4
      ASSIGN_OR_RETURN(uint64_t n, ReadLE(op == 0x8a ? 1 : 4));
      ASSIGN_OR_RETURN(absl::string_view bytes, ReadBytes(n));
      return PushLong(bytes);
    }
    case 'F': {
      ASSIGN_OR_RETURN(absl::string_view line, ReadLine());
      Value v;
      v.kind = Kind::kFloat;
      if (!absl::SimpleAtod(line, &v.f)) {
        return Error(op_pos_, "bad FLOAT text");
      }
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'G': {
      ASSIGN_OR_RETURN(absl::string_view b, ReadBytes(8));
      uint64_t u = 0;
      for (int k = 0; k < 8; ++k) u = (u << 8) | static_cast<uint8_t>(b[k]);
      Value v;
      v.kind = Kind::kFloat;
      std::memcpy(&v.f, &u, sizeof(v.f));
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    default:
      return std::nullopt;
  }
}

// Text and byte strings.
std::optional<absl::Status> Decoder::StringOp(uint8_t op) {
  switch (op) {
    case 'S':
    case 'V': {  // protocol-0 text strings: quotes stripped, escapes kept
      ASSIGN_OR_RETURN(absl::string_view line, ReadLine());
      if (op == 'S' && line.size() >= 2 &&
          (line.front() == '\'' || line.front() == '"') &&
          line.back() == line.front()) {
        line = line.substr(1, line.size() - 2);
      }
      PushStr(Kind::kStr, line);
      return absl::OkStatus();
    }
    case 'T':
    case 'U':
    case 'X':
    case 0x8c:
    case 0x8d:
    case 'B':
    case 'C':
    case 0x8e:
    case 0x96: {
      size_t width = (op == 'U' || op == 0x8c || op == 'C')     ? 1
                     : (op == 0x8d || op == 0x8e || op == 0x96) ? 8
                                                                : 4;
      ASSIGN_OR_RETURN(uint64_t n, ReadLE(width));
      ASSIGN_OR_RETURN(absl::string_view s, ReadBytes(n));
      bool bytes = op == 'B' || op == 'C' || op == 0x8e || op == 0x96;
      PushStr(bytes ? Kind::kBytes : Kind::kStr, s);
      return absl::OkStatus();
    }
    default:
      return std::nullopt;
  }
}

// New lists, tuples, dicts and sets, empty or from the stack.
std::optional<absl::Status> Decoder::ContainerOp(uint8_t op) {
  switch (op) {
    case ']':
      stack_.push_back(NewContainer(Kind::kList));
      return absl::OkStatus();
    case ')':
      stack_.push_back(NewContainer(Kind::kTuple));
      return absl::OkStatus();
    case '}':
      stack_.push_back(NewContainer(Kind::kDict));
      return absl::OkStatus();
    case 0x8f:
      stack_.push_back(NewContainer(Kind::kSet));
      return absl::OkStatus();
    case 'l':
    case 't':
    case 0x91: {  // LIST, TUPLE, FROZENSET from mark
      ASSIGN_OR_RETURN(std::vector<Value> items, PopToMark());
      Kind k = op == 'l' ? Kind::kList : op == 't' ? Kind::kTuple : Kind::kSet;
      stack_.push_back(NewContainer(k, std::move(items)));
      return absl::OkStatus();
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      size_t n = op - 0x84;
      if (stack_.size() < n) return Error(op_pos_, "stack underflow");
      std::vector<Value> items(n);
      for (size_t k = n; k > 0; --k) {
        ASSIGN_OR_RETURN(items[k - 1], Pop());
      }
      stack_.push_back(NewContainer(Kind::kTuple, std::move(items)));
      return absl::OkStatus();
    }
    case 'd': {
      ASSIGN_OR_RETURN(std::vector<Value> items, PopToMark());
      if (items.size() % 2 != 0) return Error(op_pos_, "DICT with odd items");
      stack_.push_back(NewContainer(Kind::kDict, std::move(items)));
      return absl::OkStatus();
    }
    default:
      return std::nullopt;
  }
}

// Items appended to the list or dict below them.
std::optional<absl::Status> Decoder::FillOp(uint8_t op) {
  switch (op) {
    case 'a': {
      ASSIGN_OR_RETURN(Value item, Pop());
      ASSIGN_OR_RETURN(Container * c, TopContainer(0, Kind::kList));
      c->items.push_back(std::move(item));
      return absl::OkStatus();
    }
    case 'e':
    case 0x90: {  // APPENDS, ADDITEMS
      ASSIGN_OR_RETURN(std::vector<Value> items, PopToMark());
      ASSIGN_OR_RETURN(Container * c, TopContainer(0, Kind::kList));
      for (Value& v : items) c->items.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 's': {
      ASSIGN_OR_RETURN(Value value, Pop());
      ASSIGN_OR_RETURN(Value key, Pop());
      ASSIGN_OR_RETURN(Container * c, TopContainer(0, Kind::kDict));
      c->items.push_back(std::move(key));
      c->items.push_back(std::move(value));
      return absl::OkStatus();
    }
    case 'u': {
      ASSIGN_OR_RETURN(std::vector<Value> items, PopToMark());
      if (items.size() % 2 != 0) {
        return Error(op_pos_, "SETITEMS with odd items");
      }
      ASSIGN_OR_RETURN(Container * c, TopContainer(0, Kind::kDict));
      for (Value& v : items) c->items.push_back(std::move(v));
      return absl::OkStatus();
    }
    default:
      return std::nullopt;
  }
}

// The memo: PUT, GET and their binary forms, MEMOIZE.
std::optional<absl::Status> Decoder::MemoOp(uint8_t op) {
  switch (op) {
    case 'p':
    case 'g': {
      ASSIGN_OR_RETURN(absl::string_view line, ReadLine());
      uint64_t index;
      if (!absl::SimpleAtoi(line, &index)) {
        return Error(op_pos_, "bad memo index");
      }
      return op == 'p' ? Put(index) : Get(index);
    }
    case 'q':
    case 'r': {
      ASSIGN_OR_RETURN(uint64_t index, ReadLE(op == 'q' ? 1 : 4));
      return Put(index);
    }
    case 0x94:
      return Put(memo_.size());  // MEMOIZE
    case 'h':
    case 'j': {
      ASSIGN_OR_RETURN(uint64_t index, ReadLE(op == 'h' ? 1 : 4));
      return Get(index);
    }
    default:
      return std::nullopt;
  }
}

absl::StatusOr<json> Decoder::ToJson(const Value& v, int depth,
                                     int64_t* budget) {
  if (--*budget < 0) {
    return Error(0, "pickle expands to too many values (shared references)");
  }
  if (depth > 256) {
    return Error(0, "nesting deeper than 256 (or a reference cycle)");
  }
  switch (v.kind) {
    case Kind::kNone:
    case Kind::kMark:
      return json(nullptr);
    case Kind::kBool:
      return json(v.i != 0);
    case Kind::kInt:
      return json(v.i);
    case Kind::kFloat:
      return std::isfinite(v.f) ? json(v.f) : json(nullptr);
    case Kind::kStr:
    case Kind::kBytes: {
      // nlohmann rejects invalid UTF-8 only when dumping; keep bytes as is.
      return json(v.s);
    }
    case Kind::kDict: {
      json out = json::object();
      const std::vector<Value>& items = arena_[v.container].items;
      for (size_t k = 0; k + 1 < items.size(); k += 2) {
        const Value& key = items[k];
        std::string key_text;
        switch (key.kind) {
          case Kind::kStr:
          case Kind::kBytes:
            key_text = key.s;
            break;
          case Kind::kInt:
            key_text = absl::StrCat(key.i);
            break;
          case Kind::kBool:
            key_text = key.i ? "True" : "False";
            break;
          case Kind::kNone:
            key_text = "None";
            break;
          case Kind::kFloat:
            key_text = absl::StrCat(key.f);
            break;
          default:
            return Error(0, "dict key is a container (not supported)");
        }
        ASSIGN_OR_RETURN(json value, ToJson(items[k + 1], depth + 1, budget));
        out[key_text] = std::move(value);
      }
      return out;
    }
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kSet: {
      json out = json::array();
      // Index loop: ToJson never grows the arena, but keep no reference
      // across the recursive call anyway.
      size_t n = arena_[v.container].items.size();
      for (size_t k = 0; k < n; ++k) {
        ASSIGN_OR_RETURN(
            json item, ToJson(arena_[v.container].items[k], depth + 1, budget));
        out.push_back(std::move(item));
      }
      return out;
    }
  }
  return json(nullptr);
}

}  // namespace

absl::StatusOr<nlohmann::json> DecodePickle(absl::string_view data,
                                            absl::string_view name) {
  Decoder decoder(data, name);
  return decoder.Run();
}

bool LooksLikePickle(absl::string_view data) {
  return data.size() >= 2 && static_cast<uint8_t>(data[0]) == 0x80 &&
         static_cast<uint8_t>(data[1]) >= 2 &&
         static_cast<uint8_t>(data[1]) <= 5;
}

}  // namespace pitstop::importers
