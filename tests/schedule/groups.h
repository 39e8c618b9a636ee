/* The test groups of test_schedule: one line per file, X(name) runs run_<name>_tests(). */
#define STOF_TEST_GROUPS(X) \
  X(state)                  \
  X(split)                  \
  X(fuse_reorder_tile)      \
  X(annotate)               \
  X(knob)                   \
  X(sample)                 \
  X(grouping)               \
  X(errors)                 \
  X(trace)                  \
  X(build)                  \
  X(compute_at)             \
  X(compute_inline)         \
  X(cache)                  \
  X(rfactor)                \
  X(examples)               \
  X(codegen_cuda)           \
  X(cross_thread)           \
  X(tensorize)              \
  X(auto)                   \
  X(safety)                 \
  X(random_schedules)       \
  X(nomem)
