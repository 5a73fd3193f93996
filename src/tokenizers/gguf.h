// The metadata of a GGUF file (llama.cpp's model format): its key/value
// section, read without the tensors, for the tokenizer it holds
// (tokenizer.ggml.*; gguf_tokenizer.cpp) and the model's identity
// (general.*).
//
// The layout (versions 2 and 3, little-endian): the magic "GGUF", a uint32
// version, a uint64 tensor count, a uint64 key/value count, then each key
// (a string: uint64 length and bytes) with a uint32 value type and its
// value: integers of 8 to 64 bits, float32, float64, bool, a string, or an
// array (uint32 element type, uint64 count, the elements; arrays of arrays
// too). Only the key/value section is read: a model's tensors (gigabytes)
// are never loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tokenscope::tokenizers::gguf {

// One value. Integers and bools are kept as int64 or uint64, floats as
// double; arrays of strings and of numbers keep every element. Values of
// keys the caller does not keep, and arrays of arrays, are skipped (their
// bytes checked, not stored).
struct Value {
  enum class Type { kInt, kUint, kFloat, kBool, kString, kStrings, kNumbers, kSkipped };
  Type type = Type::kSkipped;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<std::string> strings;
  std::vector<double> numbers;
  std::string type_name;  // as GGUF names it: "uint32", "string", "array of float32", ...
};

struct Metadata {
  std::string file;
  std::uint32_t version = 0;
  std::uint64_t tensor_count = 0;
  std::map<std::string, Value, std::less<>> values;  // the kept keys
  std::vector<std::string> keys;                     // every key, in file order

  const Value* find(std::string_view key) const;
  // Typed access; a key of another type is an InputError naming the key,
  // the type found and the one expected. nullopt when absent.
  std::optional<std::string> string(std::string_view key) const;
  std::optional<std::uint64_t> uint(std::string_view key) const;  // any non-negative integer
  std::optional<bool> boolean(std::string_view key) const;
  const std::vector<std::string>* strings(std::string_view key) const;
  const std::vector<double>* numbers(std::string_view key) const;
};

// Whether `bytes` start with the GGUF magic.
bool is_gguf(std::string_view first_bytes);

// Parses the key/value section from the bytes of a file's beginning.
// `keep(key)` tells which keys' values are stored. Throws InputError
// (file, the byte offset in the field, what was expected) on a bad magic,
// an unsupported version (1), a type that does not exist, a length or
// count past the end of the data, or a string that is not valid UTF-8 in a
// key. With `more_available` true, running out of bytes throws NeedMore
// instead, so the caller can read further and retry.
struct NeedMore {
  std::size_t at_least = 0;  // bytes the section needs so far
};
Metadata parse_metadata(std::string_view bytes, const std::string& file, bool (*keep)(std::string_view key),
                        bool more_available = false);

// Reads a GGUF file's key/value section from disk, reading only as much of
// the file as that section takes (doubling from 4 MiB, at most 512 MiB).
Metadata read_metadata(const std::string& file, bool (*keep)(std::string_view key));

}  // namespace tokenscope::tokenizers::gguf
