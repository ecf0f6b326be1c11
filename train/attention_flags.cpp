#include "tapegrad/train/attention_flags.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/strict_numbers.h"
#include "tapegrad/train/config.h"

namespace tg::train {
namespace {

// One number of an --attention text: what it is, and the range it must be in.
struct NumberRule {
  const char* name;
  int64_t low, high;
};

// The numbers after "kind:", split at commas, each parsed strictly and checked against its rule;
// optional ones at the end may be left out. `text` is the whole value of `flag`, for the messages.
std::vector<int64_t> parse_numbers(const std::string& text, const std::string& numbers,
                                   const std::vector<NumberRule>& rules, size_t required,
                                   const char* flag = "--attention") {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = numbers.find(',', start);
    fields.push_back(numbers.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const std::string what = std::string(flag) + " " + text;
  TG_CHECK(fields.size() >= required && fields.size() <= rules.size(), what, ": expected ",
           required == rules.size() ? std::to_string(required) : std::to_string(required) + " to " +
                                                                  std::to_string(rules.size()),
           " comma-separated number", rules.size() == 1 ? "" : "s", " after the colon, got ",
           fields.size());
  std::vector<int64_t> values;
  for (size_t i = 0; i < fields.size(); ++i) {
    const NumberRule& rule = rules[i];
    const int64_t value = parse_int64(fields[i], (what + " (" + rule.name + ")").c_str());
    TG_CHECK(value >= rule.low && value <= rule.high, what, ": ", rule.name, " must be in [",
             rule.low, ", ", rule.high, "], got ", value);
    values.push_back(value);
  }
  return values;
}

const char* const kKinds =
    "full, local:W, band:W[,D], bigbird:W,R,G, linformer:K, performer:M or reformer:B,R";

}  // namespace

nn::AttentionSpec parse_attention(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const bool has_numbers = colon != std::string::npos;
  const std::string numbers = has_numbers ? text.substr(colon + 1) : "";
  const NumberRule window{"the window W", 1, Limits::sequence};
  nn::AttentionSpec spec;
  if (kind == "full") {
    TG_CHECK(!has_numbers, "--attention ", text, ": full takes no numbers");
    return spec;
  }
  TG_CHECK(kind == "local" || kind == "band" || kind == "bigbird" || kind == "linformer" ||
               kind == "performer" || kind == "reformer",
           "--attention must be ", kKinds, ", got '", text, "'");
  TG_CHECK(has_numbers, "--attention ", text, ": ", kind, " needs its numbers (", kKinds, ")");
  if (kind == "local") {
    spec.kind = nn::AttentionKind::local;
    spec.window = parse_numbers(text, numbers, {window}, 1)[0];
  } else if (kind == "band") {
    spec.kind = nn::AttentionKind::band;
    const auto values =
        parse_numbers(text, numbers, {window, {"the dilation D", 1, Limits::sequence}}, 1);
    spec.window = values[0];
    if (values.size() == 2) spec.dilation = values[1];
    TG_CHECK(spec.window * spec.dilation <= Limits::sequence, "--attention ", text,
             ": the band's reach W x D must be at most ", Limits::sequence);  // both <= 2^20
  } else if (kind == "bigbird") {
    spec.kind = nn::AttentionKind::bigbird;
    const auto values = parse_numbers(
        text, numbers,
        {window, {"the random blocks R", 0, Limits::sequence / kSparseBlock},
         {"the global tokens G", 0, Limits::sequence}},
        3);
    spec.window = values[0];
    spec.random_blocks = values[1];
    spec.global_tokens = values[2];
  } else if (kind == "linformer") {
    spec.kind = nn::AttentionKind::linformer;
    spec.rank = parse_numbers(text, numbers, {{"the rank K", 1, Limits::sequence}}, 1)[0];
  } else if (kind == "performer") {
    spec.kind = nn::AttentionKind::performer;
    spec.features = parse_numbers(text, numbers, {{"the features M", 1, Limits::sequence}}, 1)[0];
  } else {
    spec.kind = nn::AttentionKind::reformer;
    const auto values = parse_numbers(
        text, numbers, {{"the buckets B", 2, Limits::sequence}, {"the rounds R", 1, 64}}, 2);
    spec.buckets = values[0];
    spec.rounds = values[1];
    TG_CHECK(spec.buckets % 2 == 0, "--attention ", text, ": the buckets B must be even (the ",
             "hash is the argmax over B/2 rotations and their negatives), got ", spec.buckets);
  }
  return spec;
}

std::string format_attention(const nn::AttentionSpec& spec) {
  // "kind:" and the numbers, comma-separated
  const auto text = [](const char* kind, std::initializer_list<int64_t> numbers) {
    std::string out = std::string(kind) + ":";
    for (const int64_t number : numbers) {
      if (out.back() != ':') out += ',';
      out += std::to_string(number);
    }
    return out;
  };
  switch (spec.kind) {
    case nn::AttentionKind::full: return "full";
    case nn::AttentionKind::local: return text("local", {spec.window});
    case nn::AttentionKind::band:
      return spec.dilation == 1 ? text("band", {spec.window}) : text("band", {spec.window, spec.dilation});
    case nn::AttentionKind::bigbird:
      return text("bigbird", {spec.window, spec.random_blocks, spec.global_tokens});
    case nn::AttentionKind::linformer: return text("linformer", {spec.rank});
    case nn::AttentionKind::performer: return text("performer", {spec.features});
    case nn::AttentionKind::reformer: return text("reformer", {spec.buckets, spec.rounds});
  }
  fail("format_attention: unknown attention kind ", static_cast<int>(spec.kind));
}

nn::AttentionSpec parse_position(const std::string& text) {
  nn::AttentionSpec spec;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const bool has_numbers = colon != std::string::npos;
  const std::string numbers = has_numbers ? text.substr(colon + 1) : "";
  const bool fixed = kind == "sinusoidal" || kind == "rope" || kind == "alibi" || kind == "none";
  TG_CHECK(fixed || kind == "t5" || kind == "shaw", "--position must be sinusoidal, rope, alibi, ",
           "none, t5[:B[,D]] or shaw[:K], got '", text, "'");
  TG_CHECK(!has_numbers || !fixed, "--position ", text, ": ", kind,
           " takes no numbers (only t5:B[,D] and shaw:K do)");
  if (fixed) {
    spec.position = kind == "sinusoidal" ? nn::PositionKind::sinusoidal
                    : kind == "rope"     ? nn::PositionKind::rope
                    : kind == "alibi"    ? nn::PositionKind::alibi
                                         : nn::PositionKind::none;
    return spec;
  }
  nn::RelativePositions& r = spec.relative;
  if (kind == "t5") {
    spec.position = nn::PositionKind::t5;
    if (has_numbers) {
      const auto values = parse_numbers(text, numbers, {{"the buckets B", 4, 1024},
                                        {"the max distance D", 4, Limits::sequence}}, 1,
                                        "--position");
      r.buckets = values[0];
      if (values.size() == 2) r.max_distance = values[1];
    }
    TG_CHECK(r.max_distance >= r.buckets, "--position ", text, ": the max distance D ",
             r.max_distance, " must be at least the buckets B ", r.buckets, " (the log-spaced ",
             "buckets start at B/4, B/2 causal, and end at D)");
  } else {
    spec.position = nn::PositionKind::shaw;
    if (has_numbers) {
      r.clip = parse_numbers(text, numbers, {{"the clipping distance K", 1, Limits::sequence}}, 1,
                             "--position")[0];
    }
  }
  return spec;
}

std::string format_position(const nn::AttentionSpec& spec) {
  const nn::RelativePositions& r = spec.relative;
  switch (spec.position) {
    case nn::PositionKind::sinusoidal: return "sinusoidal";
    case nn::PositionKind::rope: return "rope";
    case nn::PositionKind::alibi: return "alibi";
    case nn::PositionKind::none: return "none";
    case nn::PositionKind::t5:
      return "t5:" + std::to_string(r.buckets) + "," + std::to_string(r.max_distance);
    case nn::PositionKind::shaw: return "shaw:" + std::to_string(r.clip);
  }
  fail("format_position: unknown position kind ", static_cast<int>(spec.position));
}

void check_attention_fits(const nn::AttentionSpec& spec, const std::string& task, int64_t max_len,
                          int64_t head_dim) {
  const std::string attention = "--attention " + format_attention(spec);
  const bool linformer = spec.kind == nn::AttentionKind::linformer;
  const bool performer = spec.kind == nn::AttentionKind::performer;
  TG_CHECK(!(linformer && task == "charlm"), attention, " cannot train a charlm: its attention is ",
           "causal, and Linformer's projection along the sequence mixes later positions into every ",
           "row (use textcls or timeseries, or another --attention)");
  TG_CHECK(!(spec.position == nn::PositionKind::alibi && !spec.has_scores()),
           "--position alibi needs the fused kernel's [S, S] scores, which ", attention,
           " does not compute (ALiBi works with full, local, band and bigbird)");
  const bool learned = spec.position == nn::PositionKind::t5 ||
                       spec.position == nn::PositionKind::shaw;
  TG_CHECK(!learned || spec.has_scores(), "--position ", format_position(spec), " adds to the ",
           "[S, S] scores, which ", attention, " does not form (T5 and Shaw work with full, ",
           "local, band and bigbird)");
  TG_CHECK(spec.position != nn::PositionKind::shaw ||
               2 * spec.relative.clip + 1 <= Limits::positions / head_dim,
           "--position ", format_position(spec), ": its table [2K + 1, head dim ", head_dim,
           "] would have more than ", Limits::positions, " entries");
  TG_CHECK(spec.position != nn::PositionKind::rope || head_dim % 2 == 0, "--position rope rotates ",
           "pairs of channels and needs an even head dim (--dim / --heads), got ", head_dim);
  TG_CHECK(!linformer || spec.rank <= Limits::positions / max_len, attention, " with --max-len ",
           max_len, ": its projections [max_len, K] would have more than ", Limits::positions,
           " entries");
  TG_CHECK(!performer || spec.features <= Limits::positions / head_dim, attention,
           ": its feature matrix [M, head dim ", head_dim, "] would have more than ",
           Limits::positions, " entries");
  const bool reformer = spec.kind == nn::AttentionKind::reformer;
  TG_CHECK(!reformer || spec.rounds <= Limits::positions / (head_dim * (spec.buckets / 2)),
           attention, ": its rotations [R, head dim ", head_dim, ", B/2] would have more than ",
           Limits::positions, " entries");
}

namespace {

// Whether bigbird's layout covers every pair of `length` positions: block pair by block pair,
// either the key block is one of the query block's random blocks, or its farthest pair outside
// the global tokens lies inside the window. The corners (the farthest blocks) come first, so a
// layout that does not cover them is found at once.
bool bigbird_covers_every_pair(const SparsityLayout& layout, int64_t length, bool causal) {
  const std::vector<int64_t> random = bigbird_random_blocks(layout, length, length);
  const int64_t blocks = (length + kSparseBlock - 1) / kSparseBlock;
  const int64_t per_block = static_cast<int64_t>(random.size()) / blocks;
  if (per_block == blocks) return true;  // every query block sees every key block
  for (int64_t qb = blocks - 1; qb >= 0; --qb) {
    const auto row = random.begin() + qb * per_block;
    for (int64_t kb = 0; kb <= (causal ? qb : blocks - 1); ++kb) {
      if (std::binary_search(row, row + per_block, kb)) continue;  // a random block of qb
      const int64_t i_low = std::max(qb * kSparseBlock, layout.global_tokens);
      const int64_t j_low = std::max(kb * kSparseBlock, layout.global_tokens);
      const int64_t i_high = std::min(length, (qb + 1) * kSparseBlock) - 1;
      const int64_t j_high = std::min(length, (kb + 1) * kSparseBlock) - 1;
      if (i_low > i_high || j_low > j_high || (causal && i_high < j_low)) continue;
      const int64_t farthest = causal ? i_high - j_low : std::max(i_high - j_low, j_high - i_low);
      if (farthest >= layout.window) return false;
    }
  }
  return true;
}

}  // namespace

bool layout_covers_every_pair(const nn::AttentionSpec& spec, int64_t length, bool causal) {
  const SparsityLayout layout = spec.sparsity();
  if (layout.kind == SparsityKind::full || length < 1) return false;
  switch (layout.kind) {
    case SparsityKind::local: return layout.window >= length;  // |i - j| <= length - 1 < W
    case SparsityKind::band:  // distance 1 is off the band unless the dilation is 1
      return length == 1 || (layout.dilation == 1 && layout.window >= length);
    case SparsityKind::bigbird: return bigbird_covers_every_pair(layout, length, causal);
    default: return false;
  }
}

std::string full_coverage_notice(const nn::AttentionSpec& spec, int64_t length, bool causal,
                                 const std::string& where) {
  if (!layout_covers_every_pair(spec, length, causal)) return "";
  return "attention: --attention " + format_attention(spec) + " covers every (query, key) pair " +
         "at " + where + ": it equals full attention there";
}

}  // namespace tg::train
