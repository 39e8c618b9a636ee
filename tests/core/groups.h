/* The test groups of test_core: one line per file, X(name) runs run_<name>_tests(). */
#define STOF_TEST_GROUPS(X) \
  X(ctx)                    \
  X(dtype)                  \
  X(tensor)                 \
  X(te)                     \
  X(interp)                 \
  X(cuda)                   \
  X(safetensors)            \
  X(nomem)
