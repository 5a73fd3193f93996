// Real tokenizers: the exact token ids a served model sees (docs/tokenizer.md,
// "Real tokenizers"). `tokenscope bench --tokenizer FILE` loads one to size
// prompts against a real server.
//
// Three file formats, told apart by their first bytes:
//   * a Hugging Face `tokenizer.json` (starts with `{`) whose model is BPE:
//     byte-level BPE (GPT-2, Llama 3, Qwen2/Qwen3) and SentencePiece-style
//     BPE with byte fallback (Llama 2, Mistral), with the normalizers,
//     pre-tokenizers, added tokens, post-processors and decoders such files
//     use (hf_tokenizer.cpp lists them; anything else is refused at load);
//   * a SentencePiece model (`tokenizer.model`, a protobuf), through the
//     sentencepiece library.
//   * a GGUF model file (starts with "GGUF"): the vocabulary llama.cpp
//     serves it with, tokenized as llama.cpp does (load_gguf_tokenizer).
// A `tokenizer_config.json` next to a tokenizer.json is read, when present,
// for the BOS and EOS token names only; whether encode adds special tokens
// follows the tokenizer.json's post_processor, as in Hugging Face tokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tokenscope::tokenizers {

// What run.json records about the tokenizer in use.
struct TokenizerDescription {
  std::string kind;      // "huggingface" (tokenizer.json), "sentencepiece" (.model) or "gguf"
  std::string file;      // the path it was loaded from
  std::string model;     // e.g. "BPE (byte-level)", "BPE (byte fallback)", "sentencepiece bpe"
  std::string pipeline;  // normalizer, pre-tokenizer, post-processor and decoder in one line
  std::size_t vocab_size = 0;
  std::optional<std::int32_t> bos_id;
  std::optional<std::int32_t> eos_id;
  std::vector<std::int32_t> special_prefix;  // ids encode(text, true) puts before the text
  std::vector<std::int32_t> special_suffix;  // ... and after it
};
void to_json(nlohmann::json& out, const TokenizerDescription& d);

// A tokenizer loaded from a model's files. Every method is const and safe to
// call from several threads at once.
class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  // The ids of `text`. Special tokens written in the text (for example
  // "<|begin_of_text|>", "<s>") are recognised as the tokenizer file defines
  // them. With add_special, the tokens the tokenizer adds around a single
  // sequence (special_prefix(), special_suffix(); usually one BOS) are
  // included. Bytes that are not valid UTF-8 are first replaced by U+FFFD,
  // one per invalid sequence. Throws UsageError only when the tokenizer file
  // cannot handle this text: a regular expression over its backtracking
  // limits, an unk_token that is not in the vocabulary when a character
  // needs it.
  virtual std::vector<std::int32_t> encode(std::string_view text, bool add_special) const = 0;
  // encode(text, add_special).size().
  virtual std::size_t count(std::string_view text, bool add_special) const;

  // The text of `ids` as the tokenizer's decoder writes it; ids outside the
  // vocabulary are skipped, and special tokens too when skip_special.
  virtual std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const = 0;

  // The ids encode(text, true) adds before and after the text's own tokens.
  virtual std::span<const std::int32_t> special_prefix() const = 0;
  virtual std::span<const std::int32_t> special_suffix() const = 0;
  std::size_t num_special_added() const { return special_prefix().size() + special_suffix().size(); }
  // Whether encode(text, true) starts with the BOS token.
  bool adds_bos() const;

  virtual std::optional<std::int32_t> bos_id() const = 0;
  virtual std::optional<std::int32_t> eos_id() const = 0;

  // One more than the largest id (added tokens included).
  virtual std::size_t vocab_size() const = 0;
  // The vocabulary entry of an id as stored in the file (byte-level BPE
  // spells a leading space "Ġ", SentencePiece "▁"); nullopt outside the
  // vocabulary.
  virtual std::optional<std::string> token_to_piece(std::int32_t id) const = 0;
  virtual std::optional<std::int32_t> piece_to_id(std::string_view piece) const = 0;
  // Whether the id is a special token (added special tokens; SentencePiece
  // control symbols).
  virtual bool is_special(std::int32_t id) const = 0;

  virtual TokenizerDescription description() const = 0;
};

// Loads a tokenizer file, or a directory holding tokenizer.json (preferred)
// or tokenizer.model. The format is told by the first non-blank byte: `{`
// is a Hugging Face tokenizer.json, anything else a SentencePiece model.
// Throws InputError naming the file and the reason (unreadable, malformed,
// unsupported feature).
std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::string& path);

// The same from bytes already in memory; `file` names them in errors and in
// the description. config_json is the text of a tokenizer_config.json, or
// empty.
std::unique_ptr<TextTokenizer> parse_hf_tokenizer_json(std::string_view json_text, const std::string& file,
                                                       std::string_view config_json = {});
std::unique_ptr<TextTokenizer> parse_sentencepiece_model(std::string_view model_bytes,
                                                         const std::string& file);
// The tokenizer of a GGUF model file (llama.cpp's tokenizer.ggml.* keys:
// "llama" SentencePiece and "gpt2" byte-level BPE vocabularies with every
// pre-tokenizer type llama.cpp knows), tokenizing as llama.cpp does
// (gguf_tokenizer.cpp). load reads only the file's metadata, not its tensors.
std::unique_ptr<TextTokenizer> load_gguf_tokenizer(const std::string& file);
std::unique_ptr<TextTokenizer> parse_gguf_tokenizer(std::string_view bytes, const std::string& file);

// A word that is exactly one token wherever it stands in a text of words
// separated by single spaces.
struct SingleTokenWord {
  std::string word;
  std::int32_t first_id = 0;   // the token of `word` at the start of a text (after any BOS)
  std::int32_t spaced_id = 0;  // the token of `word` after a space
};

// The candidates (lowercase ASCII words; anything else is a UsageError)
// that encode to exactly one token both as the first word of a text and
// after a space, in the order given, without duplicates. A word w qualifies
// when encode(w, true) is the special prefix, one token, the special suffix,
// and encode(w + " " + w, false) is two tokens, the first being that token:
// the second is its spaced form. For the tokenizers this project supports,
// "w1 w2 w3" built from such words then tokenizes to exactly one token per
// word (tested on Llama 3, Qwen3 and Llama 2).
std::vector<SingleTokenWord> single_token_words(const TextTokenizer& tokenizer,
                                                std::span<const std::string> candidates);

}  // namespace tokenscope::tokenizers
