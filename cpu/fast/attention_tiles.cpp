// Which tile products the attention kernel runs: AVX-512 or AVX2 (cpu/fast/attention_tiles.h).
#include <atomic>
#include <cstdlib>
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/fast/attention_tiles.h"
#include "tapegrad/runtime/features.h"

namespace tg::cpu::tiles {
namespace {

std::atomic<int> avx2_scopes{0};  // Avx2TilesScope objects alive

// TAPEGRAD_ATTENTION_TILES: unset or empty for the best this CPU has.
bool parse_tiles(const char* value) {
  const std::string name = value ? value : "";
  if (name.empty()) return cpu_has_avx512f();
  TG_CHECK(name == "avx2" || name == "avx512", kTilesVariable, "='", name,
           "': expected avx2 or avx512 (or unset: the best this CPU has)");
  TG_CHECK(name == "avx2" || cpu_has_avx512f(), kTilesVariable,
           "=avx512: this CPU has no AVX-512 F (unset it for the best it has)");
  return name == "avx512";
}

}  // namespace

bool avx512_tiles() {
  static const bool chosen = parse_tiles(std::getenv(kTilesVariable));  // a throw: asked again
  return chosen && avx2_scopes.load(std::memory_order_relaxed) == 0;
}

Avx2TilesScope::Avx2TilesScope() { avx2_scopes.fetch_add(1); }
Avx2TilesScope::~Avx2TilesScope() { avx2_scopes.fetch_sub(1); }

}  // namespace tg::cpu::tiles
