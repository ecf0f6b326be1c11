#include "tapegrad/train/attention_flags.h"

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
// optional ones at the end may be left out. `text` is the whole flag value, for the messages.
std::vector<int64_t> parse_numbers(const std::string& text, const std::string& numbers,
                                   const std::vector<NumberRule>& rules, size_t required) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = numbers.find(',', start);
    fields.push_back(numbers.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const std::string what = "--attention " + text;
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

const char* const kKinds = "full, local:W, band:W[,D], bigbird:W,R,G, linformer:K or performer:M";

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
               kind == "performer",
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
  } else {
    spec.kind = nn::AttentionKind::performer;
    spec.features = parse_numbers(text, numbers, {{"the features M", 1, Limits::sequence}}, 1)[0];
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
  }
  fail("format_attention: unknown attention kind ", static_cast<int>(spec.kind));
}

nn::PositionKind parse_position(const std::string& text) {
  if (text == "sinusoidal") return nn::PositionKind::sinusoidal;
  if (text == "rope") return nn::PositionKind::rope;
  if (text == "alibi") return nn::PositionKind::alibi;
  if (text == "none") return nn::PositionKind::none;
  fail("--position must be sinusoidal, rope, alibi or none, got '", text, "'");
}

std::string format_position(nn::PositionKind position) {
  switch (position) {
    case nn::PositionKind::sinusoidal: return "sinusoidal";
    case nn::PositionKind::rope: return "rope";
    case nn::PositionKind::alibi: return "alibi";
    case nn::PositionKind::none: return "none";
  }
  fail("format_position: unknown position kind ", static_cast<int>(position));
}

void check_attention_fits(const nn::AttentionSpec& spec, const std::string& task, int64_t max_len,
                          int64_t head_dim) {
  const std::string attention = "--attention " + format_attention(spec);
  const bool linformer = spec.kind == nn::AttentionKind::linformer;
  const bool performer = spec.kind == nn::AttentionKind::performer;
  TG_CHECK(!(linformer && task == "charlm"), attention, " cannot train a charlm: its attention is ",
           "causal, and Linformer's projection along the sequence mixes later positions into every ",
           "row (use textcls or timeseries, or another --attention)");
  TG_CHECK(!(spec.position == nn::PositionKind::alibi && (linformer || performer)),
           "--position alibi needs the fused kernel's [S, S] scores, which ", attention,
           " does not compute (ALiBi works with full, local, band and bigbird)");
  TG_CHECK(spec.position != nn::PositionKind::rope || head_dim % 2 == 0, "--position rope rotates ",
           "pairs of channels and needs an even head dim (--dim / --heads), got ", head_dim);
  TG_CHECK(!linformer || spec.rank <= Limits::positions / max_len, attention, " with --max-len ",
           max_len, ": its projections [max_len, K] would have more than ", Limits::positions,
           " entries");
  TG_CHECK(!performer || spec.features <= Limits::positions / head_dim, attention,
           ": its feature matrix [M, head dim ", head_dim, "] would have more than ",
           Limits::positions, " entries");
}

}  // namespace tg::train
