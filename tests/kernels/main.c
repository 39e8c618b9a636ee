/* test_kernels: runs every group listed in groups.h; fails if any test fails. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "groups.h"

#define DECLARE(name) int run_##name##_tests(void);
STOF_TEST_GROUPS(DECLARE)

int main(void) {
  int failed = 0;
#define RUN(name) failed += run_##name##_tests();
  STOF_TEST_GROUPS(RUN)
  return failed ? 1 : 0;
}
