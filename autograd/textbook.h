#pragma once
// The textbook mode: the code the reading path shows is the code that runs.
//
// A learner reads explicit_attention (nn/attention.cpp), ops/matmul.cpp and the plain loops of
// cpu/reference.cpp, but a normal run takes their fast twins: one stacked GEMM for q, k and v, the
// fused tiled attention kernel, OpenBLAS, AVX2 rows and a thread pool. While a Textbook object is
// alive (on any thread: one atomic count, so a scope opened by main covers the pool's workers and
// a data loader's thread alike), the same models with the same parameters and checkpoints run the
// way the tutorial writes them:
//
//   - MultiHeadAttention projects q, k and v with three Linear layers and attends with the ops:
//     matmul, scale, mask, softmax, dropout, matmul (explicit_attention), never forward_packed,
//     stacked_linear or the fused attention op. The tape, `plot tape` and the profiler's rows name
//     those ops.
//   - Every CPU kernel takes its plain loop: cpu::fast_paths_enabled() (runtime/features.h)
//     answers false (no AVX2 or AVX-512 rows, no one-pass linear, layer norm or GELU backward),
//     GEMM is the triple loop of cpu/reference.cpp instead of OpenBLAS, and an attention kernel
//     that is still called (the op scaled_dot_product_attention used directly) runs the
//     reference loops there too.
//   - Every parallel loop runs on the calling thread: one thread, whatever --threads says.
//
// The results are the fast run's up to rounding (the reference GEMM sums in double, the fast one
// in f32 register tiles), so a loss agrees to about 1e-6 relative, not bit for bit. It is slow on
// purpose: the triple-loop GEMM alone costs 100x OpenBLAS. It governs the CPU backend; tensors on
// a CUDA device keep their kernels (the command line refuses --textbook with --device cuda).
//
// In C++:   { tg::Textbook textbook; train_step(...); }   On the command line: --textbook.
// docs/textbook.md has the table of what it switches and what it costs, measured.
namespace tg {

// Whether a Textbook scope is open anywhere in the process.
bool textbook_mode();

// While one exists, everything above runs the textbook's way. Scopes nest.
class Textbook {
 public:
  Textbook();
  ~Textbook();
  Textbook(const Textbook&) = delete;
  Textbook& operator=(const Textbook&) = delete;
};

}  // namespace tg
