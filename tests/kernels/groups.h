/* The test groups of test_kernels: one line per file, X(name) runs run_<name>_tests(). */
#define STOF_TEST_GROUPS(X) \
  X(mask)                   \
  X(mask_format)            \
  X(mask_format_gpu)        \
  X(mask_svg)               \
  X(mask_nomem)             \
  X(attention)              \
  X(attention_mod)          \
  X(attention_split)        \
  X(gemm)
