#include "tokenizers/hf_bpe.h"

namespace tokenscope::tokenizers::hf {

namespace {

// Pre-tokens up to this size are remembered within one encode call.
constexpr std::size_t kCacheMaxBytes = 64;

}  // namespace

BpeModel::BpeModel(const json& model, const Fields& f, const std::string& where) : file_(f.file()) {
  if (const json* t = Fields::find(model, "type")) {
    if (!t->is_string() || t->get<std::string>() != "BPE")
      f.fail(Fields::join(where, "type"),
             fmt::format("model {} is not supported: only BPE models are (for a SentencePiece unigram model, "
                         "pass its tokenizer.model file)",
                         quote_input(t->is_string() ? t->get<std::string>() : t->dump())));
  } else if (Fields::find(model, "merges") == nullptr) {
    f.fail(where, "no model type and no merges: only BPE models are supported");
  }
  if (const json* d = Fields::find(model, "dropout");
      d != nullptr && (!d->is_number() || d->get<double>() > 0))
    f.fail(Fields::join(where, "dropout"), "BPE dropout is not supported (it makes encoding random)");

  const json& vocab = f.require(model, "vocab", where);
  if (!vocab.is_object()) f.fail(Fields::join(where, "vocab"), "expected an object of token -> id");
  vocab_.reserve(vocab.size());
  bmp_ids_.assign(0x10000, -1);
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = f.id(id_json, Fields::join(Fields::join(where, "vocab"), token));
    vocab_[token] = id;
    std::size_t len = 0;
    if (!token.empty()) {
      const char32_t cp = unicode::decode_at(token, 0, &len);
      if (len == token.size() && cp < 0x10000) bmp_ids_[cp] = id;
    }
  }

  unk_token_ = f.optional_string(model, "unk_token", where);
  prefix_ = f.optional_string(model, "continuing_subword_prefix", where).value_or("");
  suffix_ = f.optional_string(model, "end_of_word_suffix", where).value_or("");
  fuse_unk_ = f.boolean(model, "fuse_unk", where, false);
  byte_fallback_ = f.boolean(model, "byte_fallback", where, false);
  ignore_merges_ = f.boolean(model, "ignore_merges", where, false);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = lookup(fmt::format("<0x{:02X}>", b)).value_or(-1);

  const json& merges = f.array(model, "merges", where);
  merges_.reserve(merges.size());
  const std::string merges_where = Fields::join(where, "merges");
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {  // "a b", split at the first space
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos) f.fail(Fields::index(merges_where, rank), "expected \"left right\"");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      f.fail(Fields::index(merges_where, rank), "expected \"left right\" or [\"left\", \"right\"]");
    }
    const auto ia = lookup(a), ib = lookup(b);
    if (!ia)
      f.fail(Fields::index(merges_where, rank), fmt::format("{} is not in the vocabulary", quote_input(a)));
    if (!ib)
      f.fail(Fields::index(merges_where, rank), fmt::format("{} is not in the vocabulary", quote_input(b)));
    const std::string merged =
        a + (!prefix_.empty() && b.starts_with(prefix_) ? b.substr(prefix_.size()) : b);
    const auto im = lookup(merged);
    if (!im)
      f.fail(Fields::index(merges_where, rank),
             fmt::format("the merge {} is not in the vocabulary", quote_input(merged)));
    merges_.insert(*ia, *ib, static_cast<std::uint32_t>(rank), *im);
  }
}

void BpeModel::build_symbols(std::string_view word, Ids& symbols) const {
  symbols.clear();
  std::optional<std::int32_t> pending_unk;
  const bool affixes = !prefix_.empty() || !suffix_.empty();
  std::string symbol;
  for (std::size_t i = 0; i < word.size();) {
    std::size_t len = 0;
    const char32_t cp = unicode::decode_at(word, i, &len);
    const std::string_view ch = word.substr(i, len);
    std::optional<std::int32_t> id;
    if (!affixes) {
      if (cp < 0x10000) {
        if (bmp_ids_[cp] >= 0) id = bmp_ids_[cp];
      } else {
        id = lookup(ch);
      }
      symbol.assign(ch);
    } else {
      symbol.clear();
      if (i > 0) symbol += prefix_;
      symbol += ch;
      if (i + len == word.size()) symbol += suffix_;
      id = lookup(symbol);
    }
    i += len;
    if (id) {
      if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
      symbols.push_back(*id);
      continue;
    }
    if (byte_fallback_ && std::all_of(symbol.begin(), symbol.end(), [&](char c) {
          return byte_ids_[static_cast<unsigned char>(c)] >= 0;
        })) {
      for (char c : symbol) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (unk_token_) {
      const auto unk = lookup(*unk_token_);
      if (!unk)
        throw InputError(file_, 0, "model.unk_token",
                         fmt::format("{} is not in the vocabulary, and the text has a character outside it",
                                     quote_input(*unk_token_)));
      if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
      if (!pending_unk || !fuse_unk_) pending_unk = *unk;
    }
    // Without an unk token an unknown character is dropped, as in tokenizers.
  }
  if (pending_unk) symbols.push_back(*pending_unk);
}

void BpeModel::merge(BpeScratch& s) const {
  Ids& ids = s.symbols;
  const auto n = static_cast<std::int32_t>(ids.size());
  if (n < 2) return;
  s.prev.resize(ids.size());
  s.next.resize(ids.size());
  for (std::int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Min-heap of (rank << 32 | left position): lowest rank, then leftmost.
  auto& heap = s.heap;
  heap.clear();
  const auto candidate = [&](std::int32_t i) {
    const std::int32_t j = s.next[i];
    if (j < 0) return;
    if (const auto* m = merges_.find(ids[i], ids[j]))
      heap.push_back((std::uint64_t{m->rank} << 32) | static_cast<std::uint32_t>(i));
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) candidate(i);
  std::make_heap(heap.begin(), heap.end(), std::greater<>{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const std::uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<std::uint32_t>(top >> 32);
    const auto i = static_cast<std::int32_t>(top & 0xFFFFFFFFu);
    if (ids[i] < 0) continue;
    const std::int32_t j = s.next[i];
    if (j < 0) continue;
    const auto* m = merges_.find(ids[i], ids[j]);
    if (m == nullptr || m->rank != rank) continue;  // stale: a neighbour changed since
    ids[i] = m->merged;
    ids[j] = -1;
    s.next[i] = s.next[j];
    if (s.next[j] >= 0) s.prev[s.next[j]] = i;
    const auto push = [&](std::int32_t left) {
      const std::size_t before = heap.size();
      candidate(left);
      if (heap.size() > before) std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    };
    if (s.prev[i] >= 0) push(s.prev[i]);
    push(i);
  }
  std::erase(ids, -1);
}

void BpeModel::tokenize(std::string_view word, Ids& out, BpeScratch& s) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = lookup(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxBytes;
  if (cacheable) {
    if (const auto it = s.cache.find(word); it != s.cache.end()) {
      out.insert(out.end(), s.cached.begin() + it->second.first, s.cached.begin() + it->second.second);
      return;
    }
  }
  build_symbols(word, s.symbols);
  merge(s);
  out.insert(out.end(), s.symbols.begin(), s.symbols.end());
  if (cacheable) {
    const auto begin = static_cast<std::uint32_t>(s.cached.size());
    s.cached.insert(s.cached.end(), s.symbols.begin(), s.symbols.end());
    s.cache.emplace(std::string(word), std::pair{begin, static_cast<std::uint32_t>(s.cached.size())});
  }
}

}  // namespace tokenscope::tokenizers::hf
