// GGUF metadata (gguf.h).
#include "tokenizers/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <unordered_set>

#include "core/error.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::tokenizers::gguf {
namespace {

enum GgufType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* gguf_type_name(std::uint32_t t) {
  static const char* names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                "bool",  "string", "array",  "uint64", "int64",  "float64"};
  return t <= kF64 ? names[t] : "unknown";
}

std::size_t fixed_size(std::uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    default:
      return 0;
  }
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& file, bool more) : b_(bytes), file_(file), more_(more) {}

  std::size_t pos() const { return pos_; }

  void need(std::size_t n, std::string_view what) {
    if (n <= b_.size() - pos_) return;
    if (more_) throw NeedMore{pos_ + n};
    fail(fmt::format("{} needs {} bytes at offset {}, the file ends {} bytes later", what, n, pos_,
                     b_.size() - pos_));
  }
  template <typename T>
  T scalar(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));  // GGUF is little-endian, as the hosts this builds for
    pos_ += sizeof(T);
    return v;
  }
  std::string_view bytes(std::size_t n, std::string_view what) {
    need(n, what);
    const auto v = b_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  std::string_view string(std::string_view what) {
    const auto n = scalar<std::uint64_t>(what);
    if (n > b_.size() - pos_ && !more_)
      fail(fmt::format("{}: a string of {} bytes at offset {}, past the end of the file", what, n, pos_));
    if (n > (std::uint64_t{1} << 32)) fail(fmt::format("{}: a string of {} bytes", what, n));
    return bytes(static_cast<std::size_t>(n), what);
  }
  [[noreturn]] void fail(const std::string& problem) const { throw InputError(file_, 0, field_, problem); }
  void set_field(std::string f) { field_ = std::move(f); }

 private:
  std::string_view b_;
  const std::string& file_;
  bool more_;
  std::size_t pos_ = 0;
  std::string field_;
};

double read_number(Reader& r, std::uint32_t t, std::string_view what) {
  switch (t) {
    case kU8:
      return r.scalar<std::uint8_t>(what);
    case kI8:
      return r.scalar<std::int8_t>(what);
    case kU16:
      return r.scalar<std::uint16_t>(what);
    case kI16:
      return r.scalar<std::int16_t>(what);
    case kU32:
      return r.scalar<std::uint32_t>(what);
    case kI32:
      return r.scalar<std::int32_t>(what);
    case kF32:
      return r.scalar<float>(what);
    case kU64:
      return static_cast<double>(r.scalar<std::uint64_t>(what));
    case kI64:
      return static_cast<double>(r.scalar<std::int64_t>(what));
    case kF64:
      return r.scalar<double>(what);
    case kBool:
      return r.scalar<std::uint8_t>(what) != 0 ? 1 : 0;
    default:
      r.fail(fmt::format("value type {} does not exist", t));
  }
}

// An array's elements; stored when `value` is given, else checked and skipped.
void read_array(Reader& r, Value* value, int depth) {
  const auto elem = r.scalar<std::uint32_t>("array element type");
  const auto count = r.scalar<std::uint64_t>("array count");
  if (elem > kF64) r.fail(fmt::format("array element type {} does not exist", elem));
  if (depth > 8) r.fail("arrays nested more than 8 deep");
  const std::size_t min_size = elem == kString ? 8 : elem == kArray ? 12 : fixed_size(elem);
  // Every element takes at least min_size bytes: a count the data cannot hold
  // is refused before anything is allocated.
  r.need(count > (std::uint64_t{1} << 40) ? ~std::size_t{0} / 2 : static_cast<std::size_t>(count) * min_size,
         fmt::format("an array of {} {}", count, gguf_type_name(elem)));
  if (value) value->type_name = fmt::format("array of {}", gguf_type_name(elem));
  if (elem == kString) {
    if (value) {
      value->type = Value::Type::kStrings;
      value->strings.reserve(static_cast<std::size_t>(count));
    }
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto s = r.string("array string");
      if (value) value->strings.emplace_back(s);
    }
  } else if (elem == kArray) {
    if (value) value->type = Value::Type::kSkipped;
    for (std::uint64_t i = 0; i < count; ++i) read_array(r, nullptr, depth + 1);
  } else {
    if (value) {
      value->type = Value::Type::kNumbers;
      value->numbers.reserve(static_cast<std::size_t>(count));
    }
    for (std::uint64_t i = 0; i < count; ++i) {
      const double v = read_number(r, elem, "array element");
      if (value) value->numbers.push_back(v);
    }
  }
}

void read_value(Reader& r, std::uint32_t t, Value* value) {
  if (value) value->type_name = gguf_type_name(t);
  switch (t) {
    case kString: {
      const auto s = r.string("string value");
      if (value) {
        value->type = Value::Type::kString;
        value->s = std::string(s);
      }
      return;
    }
    case kArray:
      read_array(r, value, 0);
      return;
    case kBool: {
      const auto v = r.scalar<std::uint8_t>("bool value");
      if (v > 1) r.fail(fmt::format("a bool of value {} (0 or 1 expected)", v));
      if (value) {
        value->type = Value::Type::kBool;
        value->b = v != 0;
      }
      return;
    }
    case kF32:
    case kF64: {
      const double v = read_number(r, t, "float value");
      if (value) {
        value->type = Value::Type::kFloat;
        value->f = v;
      }
      return;
    }
    case kU8:
    case kU16:
    case kU32:
    case kU64: {
      std::uint64_t v = 0;
      if (t == kU64)
        v = r.scalar<std::uint64_t>("uint64 value");
      else
        v = static_cast<std::uint64_t>(read_number(r, t, "integer value"));
      if (value) {
        value->type = Value::Type::kUint;
        value->u = v;
        value->i = static_cast<std::int64_t>(v);
      }
      return;
    }
    case kI8:
    case kI16:
    case kI32:
    case kI64: {
      std::int64_t v = 0;
      if (t == kI64)
        v = r.scalar<std::int64_t>("int64 value");
      else
        v = static_cast<std::int64_t>(read_number(r, t, "integer value"));
      if (value) {
        value->type = Value::Type::kInt;
        value->i = v;
        value->u = static_cast<std::uint64_t>(v);
      }
      return;
    }
    default:
      r.fail(fmt::format("value type {} does not exist (0 to 12)", t));
  }
}

}  // namespace

bool is_gguf(std::string_view first_bytes) {
  return first_bytes.substr(0, 4) == "GGUF";
}

const Value* Metadata::find(std::string_view key) const {
  const auto it = values.find(key);
  return it == values.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void wrong_type(const Metadata& m, std::string_view key, const Value& v, std::string_view want) {
  throw InputError(m.file, 0, std::string(key), fmt::format("a {} where {} was expected", v.type_name, want));
}
}  // namespace

std::optional<std::string> Metadata::string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != Value::Type::kString) wrong_type(*this, key, *v, "a string");
  return v->s;
}

std::optional<std::uint64_t> Metadata::uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == Value::Type::kUint) return v->u;
  if (v->type == Value::Type::kInt && v->i >= 0) return static_cast<std::uint64_t>(v->i);
  wrong_type(*this, key, *v, "a non-negative integer");
}

std::optional<bool> Metadata::boolean(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != Value::Type::kBool) wrong_type(*this, key, *v, "a bool");
  return v->b;
}

const std::vector<std::string>* Metadata::strings(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  if (v->type != Value::Type::kStrings) wrong_type(*this, key, *v, "an array of strings");
  return &v->strings;
}

const std::vector<double>* Metadata::numbers(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  if (v->type != Value::Type::kNumbers) wrong_type(*this, key, *v, "an array of numbers");
  return &v->numbers;
}

Metadata parse_metadata(std::string_view bytes, const std::string& file, bool (*keep)(std::string_view key),
                        bool more_available) {
  Reader r(bytes, file, more_available);
  Metadata m;
  m.file = file;
  r.set_field("magic");
  if (!is_gguf(r.bytes(4, "the magic"))) r.fail("not a GGUF file (it does not start with \"GGUF\")");
  r.set_field("version");
  m.version = r.scalar<std::uint32_t>("the version");
  if (m.version < 2 || m.version > 3)
    r.fail(fmt::format("GGUF version {}: versions 2 and 3 are read (llama.cpp writes 3)", m.version));
  r.set_field("tensor_count");
  m.tensor_count = r.scalar<std::uint64_t>("the tensor count");
  r.set_field("kv_count");
  const auto kv_count = r.scalar<std::uint64_t>("the key/value count");
  std::unordered_set<std::string> seen;
  // A key takes at least 12 bytes (its length and its type).
  r.need(kv_count > (std::uint64_t{1} << 40) ? ~std::size_t{0} / 2 : static_cast<std::size_t>(kv_count) * 12,
         fmt::format("{} keys", kv_count));
  for (std::uint64_t k = 0; k < kv_count; ++k) {
    r.set_field(fmt::format("key {}", k));
    const auto key = r.string("a key");
    if (!unicode::is_valid_utf8(key)) r.fail("a key that is not valid UTF-8");
    const std::string name(key);
    r.set_field(name);
    if (!seen.insert(name).second) r.fail("a key given twice");  // llama.cpp refuses duplicates too
    m.keys.push_back(name);
    const auto type = r.scalar<std::uint32_t>("a value type");
    if (type > kF64) r.fail(fmt::format("value type {} does not exist (0 to 12)", type));
    if (keep(name)) {
      Value v;
      read_value(r, type, &v);
      m.values.emplace(name, std::move(v));
    } else {
      read_value(r, type, nullptr);
    }
  }
  return m;
}

Metadata read_metadata(const std::string& file, bool (*keep)(std::string_view key)) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, 0, "", fmt::format("cannot open the GGUF file: {}", std::strerror(errno)));
  std::string buf;
  std::size_t want = std::size_t{4} << 20;
  constexpr std::size_t kMax = std::size_t{512} << 20;
  while (true) {
    const std::size_t had = buf.size();
    buf.resize(want);
    in.read(buf.data() + had, static_cast<std::streamsize>(want - had));
    buf.resize(had + static_cast<std::size_t>(in.gcount()));
    if (in.bad()) throw InputError(file, 0, "", "cannot read the GGUF file");
    const bool more = in.good() && buf.size() == want;
    try {
      return parse_metadata(buf, file, keep, more && want < kMax);
    } catch (const NeedMore& n) {
      want = std::min(kMax, std::max(want * 2, n.at_least + (std::size_t{1} << 20)));
    }
  }
}

}  // namespace tokenscope::tokenizers::gguf
